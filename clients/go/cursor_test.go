package hoarddb

// cursor_test.go reads results through cursors: past 16 MiB in all, a batch at a time;
// closed early; and a cursor read to its end is gone on the server.

import (
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/bson"
)

func TestCursorReadsAResultPast16MiB(t *testing.T) {
	c := admin(t)
	b := fresh(t, c, bson.D{{Key: "type", Value: "hash"}})
	pad := strings.Repeat("x", 100*1024)
	for start := 0; start < 200; start += 20 {
		docs := make([]bson.M, 0, 20)
		for i := start; i < start+20; i++ {
			docs = append(docs, bson.M{"_id_": i, "n": i, "pad": pad})
		}
		if _, err := b.BatchInsert(ctx(t), docs); err != nil {
			t.Fatalf("batch insert: %v", err)
		}
	}
	var whole []bson.M
	if _, err := b.Find(ctx(t), nil, &whole); err == nil || !errors.Is(err, ErrDocumentTooLarge) {
		t.Fatalf("find of 20 MiB in one answer: want DOCUMENT_TOO_LARGE, got %v", err)
	}
	cur, err := b.FindCursor(ctx(t), nil)
	if err != nil {
		t.Fatalf("find cursor: %v", err)
	}
	n, size := 0, 0
	for cur.Next(ctx(t)) {
		var d struct {
			N   int    `bson:"n"`
			Pad string `bson:"pad"`
		}
		if err := cur.Decode(&d); err != nil || d.N != n {
			t.Fatalf("document %d: %+v %v", n, d.N, err)
		}
		n++
		size += len(d.Pad)
	}
	if cur.Err() != nil || n != 200 || size < 17*1024*1024 || cur.IndexUsed != "none — full scan" {
		t.Fatalf("read %d documents, %d bytes, index %q: %v", n, size, cur.IndexUsed, cur.Err())
	}

	cur, err = b.SearchCursor(ctx(t), bson.M{"n": bson.M{"$gte": 150}}, FindOptions{BatchSize: 7, Projection: bson.M{"pad": 0}})
	if err != nil {
		t.Fatalf("search cursor: %v", err)
	}
	var rest []bson.M
	if err := cur.All(ctx(t), &rest); err != nil || len(rest) != 50 || rest[0]["n"] != int32(150) {
		t.Fatalf("all of a cursor in batches of 7: %d %v", len(rest), err)
	}
}

func TestCursorClosedEarly(t *testing.T) {
	c := admin(t)
	b := fresh(t, c, bson.D{{Key: "type", Value: "hash"}})
	docs := make([]bson.M, 0, 300)
	for i := 0; i < 300; i++ {
		docs = append(docs, bson.M{"_id_": i})
	}
	if _, err := b.BatchInsert(ctx(t), docs); err != nil {
		t.Fatalf("batch insert: %v", err)
	}
	cur, err := b.FindCursor(ctx(t), nil, FindOptions{BatchSize: 10})
	if err != nil || !cur.Next(ctx(t)) {
		t.Fatalf("find cursor: %v", err)
	}
	id := cur.id
	if err := cur.Close(ctx(t)); err != nil {
		t.Fatalf("close: %v", err)
	}
	if cur.Next(ctx(t)) {
		t.Fatalf("a closed cursor moved on")
	}
	_, err = c.Do(ctx(t), bson.D{{Key: "op", Value: "more"}, {Key: "cursor", Value: id}})
	if !errors.Is(err, ErrCursorNotFound) {
		t.Fatalf("more of a closed cursor: want CURSOR_NOT_FOUND, got %v", err)
	}
	var out []bson.M
	cur, err = b.AggregateCursor(ctx(t), bson.A{bson.M{"$match": bson.M{"_id_": bson.M{"$lt": 250}}}}, AggregateOptions{BatchSize: 100})
	if err != nil || cur.All(ctx(t), &out) != nil || len(out) != 250 {
		t.Fatalf("aggregate cursor: %d %v", len(out), err)
	}
}
