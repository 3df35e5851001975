package hoarddb

// verbs_test.go runs every verb of every store type against the TLS server.

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"
)

type item struct {
	N    int    `bson:"n"`
	Text string `bson:"text,omitempty"`
}

func TestQueues(t *testing.T) {
	c := admin(t)
	for _, typ := range []string{"fifo", "lifo"} {
		t.Run(typ, func(t *testing.T) {
			b := fresh(t, c, bson.D{{Key: "type", Value: typ}})
			for i := 1; i <= 3; i++ {
				if err := b.Push(ctx(t), item{N: i}); err != nil {
					t.Fatal(err)
				}
			}
			n, err := b.BatchPush(ctx(t), []item{{N: 4}, {N: 5}})
			if err != nil || n != 2 {
				t.Fatalf("batch_push: %d %v", n, err)
			}
			length, _ := b.Length(ctx(t))
			if length != 5 {
				t.Fatalf("length %d", length)
			}
			var next item
			found, err := b.Peek(ctx(t), &next)
			first, last := 1, 5
			if typ == "lifo" {
				first, last = 5, 1
			}
			if err != nil || !found || next.N != first {
				t.Fatalf("peek: %+v %v %v", next, found, err)
			}
			var two []item
			if err := b.PeekN(ctx(t), 2, &two); err != nil || len(two) != 2 {
				t.Fatalf("peek 2: %v %v", two, err)
			}
			var all []item
			if err := b.List(ctx(t), ListOptions{}, &all); err != nil || len(all) != 5 || all[0].N != 1 {
				t.Fatalf("list (storage order, oldest first): %v %v", all, err)
			}
			var skipped []item
			if err := b.List(ctx(t), ListOptions{After: 3, Limit: 10}, &skipped); err != nil || len(skipped) != 2 {
				t.Fatalf("list after 3: %v %v", skipped, err)
			}
			var popped item
			if found, err := b.Pop(ctx(t), &popped); err != nil || !found || popped.N != first {
				t.Fatalf("pop: %+v %v", popped, err)
			}
			var rest []item
			if err := b.PopN(ctx(t), 10, &rest); err != nil || len(rest) != 4 || rest[3].N != last {
				t.Fatalf("pop 10: %v %v", rest, err)
			}
			if found, err := b.Pop(ctx(t), &popped); err != nil || found {
				t.Fatalf("pop of an empty queue: %v %v", found, err)
			}
			page, err := b.Export(ctx(t), nil, 10)
			if err != nil || len(page.Docs) != 0 {
				t.Fatalf("export: %+v %v", page, err)
			}
			if _, err := b.Load(ctx(t), []item{{N: 9}}); err != nil {
				t.Fatalf("load: %v", err)
			}
			if n, _ := b.Length(ctx(t)); n != 1 {
				t.Fatalf("after load: %d", n)
			}
		})
	}
}

func TestHeapAndClaims(t *testing.T) {
	c := admin(t)
	heap := fresh(t, c, bson.D{{Key: "type", Value: "heap"}})
	for _, p := range []int{3, 9, 1} {
		if err := heap.Push(ctx(t), bson.M{"priority": p, "Subject": "job"}); err != nil {
			t.Fatal(err)
		}
	}
	var top bson.M
	if found, err := heap.Peek(ctx(t), &top); err != nil || !found {
		t.Fatal(err)
	}
	claims, err := heap.Claim(ctx(t), ClaimOptions{Limit: 2, Lease: time.Minute})
	if err != nil || len(claims) != 2 {
		t.Fatalf("claim: %v %v", claims, err)
	}
	var first bson.M
	if err := claims[0].Decode(&first); err != nil {
		t.Fatal(err)
	}
	if n, _ := heap.Length(ctx(t)); n != 1 {
		t.Fatalf("claimed elements are hidden: length %d", n)
	}
	if _, err := heap.Extend(ctx(t), claims[0].ClaimID, 2*time.Minute); err != nil {
		t.Fatalf("extend: %v", err)
	}
	if n, err := heap.Ack(ctx(t), claims[0].ClaimID); err != nil || n != 1 {
		t.Fatalf("ack: %d %v", n, err)
	}
	if n, err := heap.Release(ctx(t), claims[1].ClaimID); err != nil || n != 1 {
		t.Fatalf("release: %d %v", n, err)
	}
	if n, _ := heap.Length(ctx(t)); n != 2 {
		t.Fatalf("after ack and release: length %d", n)
	}
	_, err = heap.Ack(ctx(t), claims[0].ClaimID)
	if !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrClaimExpired) {
		t.Fatalf("a second ack: want NOT_FOUND or CLAIM_EXPIRED, got %v", err)
	}

	fifo := fresh(t, c, bson.D{{Key: "type", Value: "fifo"}})
	_, _ = fifo.BatchPush(ctx(t), []item{{N: 1}, {N: 2}, {N: 3}})
	claims, err = fifo.Claim(ctx(t), ClaimOptions{Limit: 3})
	if err != nil || len(claims) != 3 {
		t.Fatalf("claim on fifo: %v %v", claims, err)
	}
	if n, err := fifo.Ack(ctx(t), claims[0].ClaimID, claims[1].ClaimID, claims[2].ClaimID); err != nil || n != 3 {
		t.Fatalf("ack a list: %d %v", n, err)
	}
}

type user struct {
	ID      string               `bson:"_id_"`
	Email   string               `bson:"Email"`
	Name    string               `bson:"Name"`
	Joined  time.Time            `bson:"Joined"`
	Ref     primitive.ObjectID   `bson:"Ref"`
	Balance primitive.Decimal128 `bson:"Balance"`
}

func TestHash(t *testing.T) {
	c := admin(t)
	b := fresh(t, c, bson.D{{Key: "type", Value: "hash"}, {Key: "placement", Value: "whole"},
		{Key: "indices", Value: bson.A{bson.D{{Key: "field", Value: "Email"}, {Key: "unique", Value: true}}}}})
	bal, _ := primitive.ParseDecimal128("1234.50")
	joined := time.Date(2026, 3, 14, 9, 30, 0, 0, time.UTC)
	ann := user{ID: "ann", Email: "ann@example.com", Name: "Ann", Joined: joined, Ref: primitive.NewObjectID(), Balance: bal}
	key, err := b.Insert(ctx(t), ann)
	if err != nil || key != "ann" {
		t.Fatalf("insert: %v %v", key, err)
	}
	var got user
	if found, err := b.Get(ctx(t), "ann", &got); err != nil || !found || got != ann {
		t.Fatalf("get keeps BSON types (date, ObjectId, Decimal128): %+v %v", got, err)
	}
	if found, _ := b.Get(ctx(t), "nobody", &got); found {
		t.Fatal("get of a missing key found something")
	}
	if yes, err := b.Exists(ctx(t), "ann"); err != nil || !yes {
		t.Fatalf("exists: %v %v", yes, err)
	}
	if yes, _ := b.Exists(ctx(t), "nobody"); yes {
		t.Fatal("exists of a missing key")
	}

	// the key in use, then a unique value in use: errors.Is and errors.As
	_, err = b.Insert(ctx(t), user{ID: "ann", Email: "other@example.com"})
	var dup *DuplicateKeyError
	if !errors.Is(err, ErrDuplicateKey) || !errors.As(err, &dup) || dup.Key != "ann" {
		t.Fatalf("duplicate _id_: %v", err)
	}
	_, err = b.Insert(ctx(t), user{ID: "bob", Email: "ann@example.com"})
	if !errors.As(err, &dup) || dup.Index == "" || dup.Values["Email"] != "ann@example.com" || dup.Holder != "ann" {
		t.Fatalf("duplicate unique value: want index, values and holder, got %v (%+v)", err, dup)
	}
	var e *Error
	if !errors.As(err, &e) || e.Code != 15 || e.CodeName != "DUPLICATE_KEY" {
		t.Fatalf("errors.As *Error: %v", err)
	}

	keys, err := b.BatchInsert(ctx(t), []bson.M{{"_id_": "b1", "Email": "b1@x", "Score": 1}, {"_id_": "b2", "Email": "b2@x", "Score": 2}})
	if err != nil || len(keys) != 2 {
		t.Fatalf("batch_insert: %v %v", keys, err)
	}
	if _, err := b.Put(ctx(t), bson.M{"_id_": "b1", "Email": "b1@x", "Score": 10}); err != nil {
		t.Fatal(err)
	}
	if keys, err := b.BatchPut(ctx(t), []bson.M{{"_id_": "b3", "Email": "b3@x", "Score": 3}}); err != nil || len(keys) != 1 {
		t.Fatalf("batch_put: %v %v", keys, err)
	}
	var found []bson.M
	how, err := b.Find(ctx(t), bson.M{"Score": bson.M{"$gte": 3}}, &found)
	if err != nil || len(found) != 2 {
		t.Fatalf("find: %v %v %v", found, how, err)
	}
	how, err = b.Search(ctx(t), bson.M{"Email": "b3@x"}, &found)
	if err != nil || len(found) != 1 || how.IndexUsed == "" || how.IndexUsed == "none — full scan" {
		t.Fatalf("search by a unique field uses its index: %v %+v %v", found, how, err)
	}
	how, err = b.Search(ctx(t), bson.M{"Score": 3}, &found, FindOptions{Explain: true})
	if err != nil || how.IndexUsed != "none — full scan" {
		t.Fatalf("search with no index: %+v %v", how, err)
	}
	if n, err := b.Count(ctx(t), bson.M{"Score": bson.M{"$exists": true}}); err != nil || n != 3 {
		t.Fatalf("count: %d %v", n, err)
	}
	res, err := b.Update(ctx(t), bson.M{"_id_": "b2"}, bson.M{"$inc": bson.M{"Score": 5}})
	if err != nil || res.Matched != 1 || res.Modified != 1 {
		t.Fatalf("update: %+v %v", res, err)
	}
	if n, err := b.Delete(ctx(t), bson.M{"_id_": "b3"}); err != nil || n != 1 {
		t.Fatalf("delete: %d %v", n, err)
	}
	if n, _ := b.Length(ctx(t)); n != 3 {
		t.Fatalf("length %d", n)
	}
	var listed []bson.M
	if err := b.List(ctx(t), ListOptions{Limit: 2}, &listed); err != nil || len(listed) != 2 {
		t.Fatalf("list: %v %v", listed, err)
	}
	page, err := b.Export(ctx(t), nil, 2)
	if err != nil || len(page.Docs) != 2 || page.Next == nil {
		t.Fatalf("export: %+v %v", page, err)
	}
	page, err = b.Export(ctx(t), page.Next, 2)
	if err != nil || len(page.Docs) != 1 {
		t.Fatalf("export's second page: %+v %v", page, err)
	}
	if _, err := b.Load(ctx(t), []bson.M{{"_id_": "l1", "Email": "l1@x"}}); err != nil {
		t.Fatalf("load: %v", err)
	}
	st, err := b.Stats(ctx(t))
	if err != nil || st == nil {
		t.Fatalf("stats: %v", err)
	}
	if d, err := b.Describe(ctx(t)); err != nil || d == nil {
		t.Fatalf("describe: %v", err)
	}
}

func TestBtree(t *testing.T) {
	c := admin(t)
	b := fresh(t, c, bson.D{{Key: "type", Value: "btree"}, {Key: "key", Value: "Day"}})
	for _, d := range []string{"2026-03-14", "2026-03-01", "2026-04-02", "2026-02-28"} {
		if _, err := b.Insert(ctx(t), bson.M{"Day": d, "Amount": 10}); err != nil {
			t.Fatal(err)
		}
	}
	var march []bson.M
	if err := b.Range(ctx(t), bson.M{"$gte": "2026-03-01", "$lte": "2026-03-31"}, &march); err != nil || len(march) != 2 {
		t.Fatalf("range: %v %v", march, err)
	}
	if err := b.Range(ctx(t), bson.M{"$prefix": "2026-0"}, &march, RangeOptions{Limit: 1, Reverse: true}); err != nil ||
		len(march) != 1 || march[0]["Day"] != "2026-04-02" {
		t.Fatalf("range reversed: %v %v", march, err)
	}
	var doc bson.M
	if ok, err := b.First(ctx(t), &doc); err != nil || !ok || doc["Day"] != "2026-02-28" {
		t.Fatalf("first: %v %v", doc, err)
	}
	if ok, err := b.Last(ctx(t), &doc); err != nil || !ok || doc["Day"] != "2026-04-02" {
		t.Fatalf("last: %v %v", doc, err)
	}
	if ok, err := b.Get(ctx(t), "2026-03-14", &doc); err != nil || !ok {
		t.Fatalf("get: %v", err)
	}
	if yes, _ := b.Exists(ctx(t), "2026-03-14"); !yes {
		t.Fatal("exists")
	}
	if n, err := b.Delete(ctx(t), "2026-03-14"); err != nil || n != 1 {
		t.Fatalf("delete: %d %v", n, err)
	}
	var listed []bson.M
	if err := b.List(ctx(t), ListOptions{After: "2026-03-01"}, &listed); err != nil || len(listed) != 1 {
		t.Fatalf("list after a key: %v %v", listed, err)
	}
	if _, err := b.Insert(ctx(t), bson.M{"Amount": 1}); !errors.Is(err, ErrMissingKey) {
		t.Fatalf("no key field: want MISSING_KEY, got %v", err)
	}
	if keys, err := b.BatchInsert(ctx(t), []bson.M{{"Day": "2026-05-01"}, {"Day": "2026-05-01"}}); err != nil || len(keys) != 2 {
		t.Fatalf("equal keys coexist: %v %v", keys, err)
	}
}

func TestBlobs(t *testing.T) {
	c := admin(t)
	b := fresh(t, c, bson.D{{Key: "type", Value: "blob"}})
	small := []byte("hello, blob")
	id, err := b.PutBlob(ctx(t), bytes.NewReader(small), "hi.txt", "text/plain")
	if err != nil || id == "" {
		t.Fatalf("put inline: %q %v", id, err)
	}
	var blob Blob
	if ok, err := b.Get(ctx(t), id, &blob); err != nil || !ok || !bytes.Equal(blob.Data, small) || blob.Name != "hi.txt" {
		t.Fatalf("get: %+v %v", blob.BlobInfo, err)
	}
	// 5 MiB and a bit from a plain io.Reader: uploaded in chunks
	big := make([]byte, 5*1024*1024+123)
	_, _ = rand.Read(big)
	sum := sha256.Sum256(big)
	id2, err := b.PutBlob(ctx(t), io.MultiReader(bytes.NewReader(big)), "big.bin", "application/octet-stream")
	if err != nil {
		t.Fatalf("put in chunks: %v", err)
	}
	info, err := b.Info(ctx(t), id2)
	if err != nil || info.Size != int64(len(big)) || info.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("info: %+v %v", info, err)
	}
	var out bytes.Buffer
	n, err := b.Stream(ctx(t), id2, &out)
	if err != nil || n != int64(len(big)) || !bytes.Equal(out.Bytes(), big) {
		t.Fatalf("stream: %d %v", n, err)
	}
	r, err := b.Open(ctx(t), id2)
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 10)
	if _, err := io.ReadFull(r, head); err != nil || !bytes.Equal(head, big[:10]) {
		t.Fatalf("open, read a little: %v", err)
	}
	r.Close() // not read to its end: its connection is closed, the client carries on
	if n, _ := b.Length(ctx(t)); n != 2 {
		t.Fatalf("length %d", n)
	}
	var listed []bson.M
	if err := b.List(ctx(t), ListOptions{}, &listed); err != nil || len(listed) != 2 {
		t.Fatalf("list: %v %v", listed, err)
	}
	if _, err := b.Stream(ctx(t), "0192a3b4-c5d6-7890-abcd-ef12345678a1", io.Discard); !errors.Is(err, ErrNotFound) {
		t.Fatalf("stream of an unknown blob: want NOT_FOUND, got %v", err)
	}
	if n, err := b.Delete(ctx(t), id); err != nil || n != 1 {
		t.Fatalf("delete: %d %v", n, err)
	}
	// a failing reader aborts the upload: nothing stored
	_, err = b.PutBlob(ctx(t), io.MultiReader(bytes.NewReader(big[:2*1024*1024]), failing{}), "x", "")
	if err == nil || !errors.Is(err, errBroken) {
		t.Fatalf("a failing reader: %v", err)
	}
	if n, _ := b.Length(ctx(t)); n != 1 {
		t.Fatalf("an aborted upload stored something: length %d", n)
	}
	// an upload to a bucket that does not exist is refused, early or at its end
	_, err = c.Database("app").Bucket("NoSuchBlobs").PutBlob(ctx(t), io.MultiReader(bytes.NewReader(big)), "", "")
	if !errors.Is(err, ErrBucketNotFound) {
		t.Fatalf("upload to no bucket: %v", err)
	}
	if _, err := b.Length(ctx(t)); err != nil {
		t.Fatalf("the client after a refused upload: %v", err)
	}
}

var errBroken = errors.New("the disk broke")

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errBroken }

func TestStoreFields(t *testing.T) {
	c := admin(t)
	b := fresh(t, c, bson.D{{Key: "type", Value: "hash"}, {Key: "store_fields", Value: bson.A{
		bson.M{"name": "Log", "type": "fifo"}, bson.M{"name": "Feed", "type": "lifo"}, bson.M{"name": "Tasks", "type": "heap"},
		bson.M{"name": "ByID", "type": "hash"}, bson.M{"name": "ByDate", "type": "btree"}, bson.M{"name": "Files", "type": "blob"}}}})
	if _, err := b.Insert(ctx(t), bson.M{"_id_": "p1"}); err != nil {
		t.Fatal(err)
	}
	p := b.Doc("p1")
	for _, name := range []string{"Log", "Feed"} {
		f := p.Field(name)
		if n, err := f.BatchPush(ctx(t), []item{{N: 1}, {N: 2}, {N: 3}}); err != nil || n != 3 {
			t.Fatalf("%s batch_push: %d %v", name, n, err)
		}
		var one item
		if ok, err := f.Pop(ctx(t), &one); err != nil || !ok || one.N != map[string]int{"Log": 1, "Feed": 3}[name] {
			t.Fatalf("%s pop: %+v %v", name, one, err)
		}
		var rest []item
		if err := f.PopN(ctx(t), 5, &rest); err != nil || len(rest) != 2 {
			t.Fatalf("%s pop 5: %v %v", name, rest, err)
		}
	}
	tasks := p.Field("Tasks")
	_ = tasks.Push(ctx(t), bson.M{"priority": 1, "T": "low"})
	_ = tasks.Push(ctx(t), bson.M{"priority": 5, "T": "high"})
	var top bson.M
	if ok, err := tasks.Pop(ctx(t), &top); err != nil || !ok || top["T"] != "high" {
		t.Fatalf("heap field pop: %v %v", top, err)
	}
	byID := p.Field("ByID")
	if _, err := byID.Put(ctx(t), "e1", bson.M{"Amount": 120}); err != nil {
		t.Fatal(err)
	}
	if _, err := byID.Put(ctx(t), "e1", bson.M{"Amount": 95}); err != nil {
		t.Fatal(err)
	}
	var e bson.M
	if ok, err := byID.Get(ctx(t), "e1", &e); err != nil || !ok || e["Amount"] != int32(95) {
		t.Fatalf("hash field get after a second put: %v %v", e, err)
	}
	if n, err := byID.Length(ctx(t)); err != nil || n != 1 {
		t.Fatalf("hash field length: %d %v", n, err)
	}
	if n, err := byID.Delete(ctx(t), "e1"); err != nil || n != 1 {
		t.Fatalf("hash field delete: %d %v", n, err)
	}
	byDate := p.Field("ByDate")
	for _, k := range []string{"2026-03-14/e1", "2026-03-02/e3", "2026-04-01/e4"} {
		if _, err := byDate.Put(ctx(t), k, bson.M{"K": k}); err != nil {
			t.Fatal(err)
		}
	}
	var entries []struct {
		Key string `bson:"key"`
		Doc bson.M `bson:"doc"`
	}
	if err := byDate.List(ctx(t), ListOptions{After: "2026-03-00", Limit: 2}, &entries); err != nil || len(entries) != 2 ||
		entries[0].Key != "2026-03-02/e3" || entries[1].Key != "2026-03-14/e1" {
		t.Fatalf("btree field list in key order: %+v %v", entries, err)
	}
	if _, err := byDate.Pop(ctx(t), &e); !errors.Is(err, ErrVerbNotSupported) {
		t.Fatalf("pop on a btree field: %v", err)
	}
	files := p.Field("Files")
	id, err := files.PutBlob(ctx(t), bytes.NewReader([]byte("lease text")), "lease.txt", "text/plain")
	if err != nil {
		t.Fatal(err)
	}
	info, err := files.Info(ctx(t), id)
	if err != nil || info.Size != 10 || info.Name != "lease.txt" {
		t.Fatalf("blob field info: %+v %v", info, err)
	}
	var blob Blob
	if ok, err := files.Get(ctx(t), id, &blob); err != nil || !ok || string(blob.Data) != "lease text" {
		t.Fatalf("blob field get: %v", err)
	}
	var out bytes.Buffer
	if _, err := files.Stream(ctx(t), id, &out); err != nil || out.String() != "lease text" {
		t.Fatalf("blob field stream: %q %v", out.String(), err)
	}
	if n, err := files.Delete(ctx(t), id); err != nil || n != 1 {
		t.Fatalf("blob field delete: %d %v", n, err)
	}
	if _, err := p.Field("Nope").Length(ctx(t)); !errors.Is(err, ErrBadValue) {
		t.Fatalf("no such store field: %v", err)
	}
}

func TestNestedStoreFields(t *testing.T) {
	c := admin(t)
	b := fresh(t, c, bson.D{{Key: "type", Value: "hash"}, {Key: "store_fields", Value: bson.A{
		bson.M{"name": "Friends", "type": "hash", "store_fields": bson.A{
			bson.M{"name": "Messages", "type": "fifo"}, bson.M{"name": "Photos", "type": "blob"}}}}}})
	if _, err := b.Insert(ctx(t), bson.M{"_id_": "jane"}); err != nil {
		t.Fatal(err)
	}
	friends := b.Doc("jane").Field("Friends")
	messages := friends.Element("bob").Field("Messages")
	if err := messages.Push(ctx(t), bson.M{"Text": "hi"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a push before the element exists: %v", err)
	}
	if _, err := friends.Put(ctx(t), "bob", bson.M{"Since": 2019}); err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"hi", "lunch?"} {
		if err := messages.Push(ctx(t), bson.M{"Text": text}); err != nil {
			t.Fatal(err)
		}
	}
	var first bson.M
	if ok, err := messages.Pop(ctx(t), &first); err != nil || !ok || first["Text"] != "hi" {
		t.Fatalf("pop of a store a level deeper: %v %v", first, err)
	}
	photos := friends.Element("bob").Field("Photos")
	if _, err := photos.PutBlob(ctx(t), bytes.NewReader([]byte("a photo")), "p.jpg", "image/jpeg"); err != nil {
		t.Fatal(err)
	}
	if n, err := photos.Length(ctx(t)); err != nil || n != 1 {
		t.Fatalf("blob store a level deeper: %d %v", n, err)
	}
	if n, err := friends.Delete(ctx(t), "bob"); err != nil || n != 1 {
		t.Fatalf("delete of the element: %d %v", n, err)
	}
	if _, err := messages.Length(ctx(t)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("its stores went with it: %v", err)
	}
}
