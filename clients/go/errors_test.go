package hoarddb

// errors_test.go provokes the server's refusals and checks each arrives as its Go value.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/bson"
)

func TestRefusalsMapToTheirValues(t *testing.T) {
	c := admin(t)
	db := c.Database("app")
	hash := fresh(t, c, bson.D{{Key: "type", Value: "hash"}, {Key: "store_fields", Value: bson.A{bson.M{"name": "Log", "type": "lifo"}}}})
	fifo := c.Database("app").Bucket(hash.Name + "Q")
	_, _ = db.DropBucket(ctx(t), fifo.Name)
	if _, err := db.CreateBucket(ctx(t), fifo.Name, bson.M{"type": "fifo"}); err != nil {
		t.Fatal(err)
	}
	_, _ = hash.Insert(ctx(t), bson.M{"_id_": "k"})
	var sink bson.M
	var list []bson.M
	cases := []struct {
		want *Error
		call func() error
	}{
		{ErrBadValue, func() error { _, err := hash.Doc("k").Field("Nope").Length(ctx(t)); return err }},
		{ErrUnknownOption, func() error {
			_, err := db.CreateBucket(ctx(t), "Opt", bson.M{"type": "fifo", "colour": "red"})
			return err
		}},
		{ErrInvalidName, func() error { _, err := db.CreateBucket(ctx(t), "no spaces", bson.M{"type": "fifo"}); return err }},
		{ErrUnknownStoreType, func() error { _, err := db.CreateBucket(ctx(t), "Typ", bson.M{"type": "pile"}); return err }},
		{ErrDatabaseNotFound, func() error { _, err := c.Database("nosuchdb").Buckets(ctx(t)); return err }},
		{ErrBucketNotFound, func() error { _, err := db.Bucket("NoSuch").Length(ctx(t)); return err }},
		{ErrBucketExists, func() error { _, err := db.CreateBucket(ctx(t), fifo.Name, bson.M{"type": "fifo"}); return err }},
		{ErrDatabaseExists, func() error { _, err := c.CreateDatabase(ctx(t), "app"); return err }},
		{ErrVerbNotSupported, func() error { _, err := fifo.Get(ctx(t), "k", &sink); return err }},
		{ErrVerbNotSupported, func() error { _, err := hash.Doc("k").Field("Log").Get(ctx(t), "x", &sink); return err }},
		{ErrUnknownVerb, func() error {
			_, err := c.Do(ctx(t), bson.D{{Key: "op", Value: "juggle"}, {Key: "db", Value: "app"}, {Key: "bucket", Value: fifo.Name}})
			return err
		}},
		{ErrLimitExceeded, func() error { return fifo.PeekN(ctx(t), 5000, &list) }},
		{ErrNotFound, func() error { return hash.Doc("nobody").Field("Log").Push(ctx(t), bson.M{"a": 1}) }},
		{ErrInvalidArgument, func() error {
			_, err := c.Do(ctx(t), bson.D{{Key: "op", Value: "push"}, {Key: "db", Value: "app"}, {Key: "bucket", Value: fifo.Name},
				{Key: "args", Value: bson.M{"doc": bson.M{}, "colour": 1}}})
			return err
		}},
		{ErrNotADocument, func() error { _, err := fifo.BatchPush(ctx(t), bson.A{1, 2}); return err }},
	}
	for _, tc := range cases {
		err := tc.call()
		var e *Error
		if !errors.Is(err, tc.want) || !errors.As(err, &e) || e.Code != tc.want.Code || e.CodeName != tc.want.CodeName || e.Message == "" {
			t.Errorf("want %s (%d), got %v", tc.want.CodeName, tc.want.Code, err)
		}
	}
}

func TestAnyCodeFromTheWire(t *testing.T) {
	// every code the server may send maps to its value, with its details
	for code, name := range codeNames {
		raw, _ := bson.Marshal(bson.D{{Key: "id", Value: 1}, {Key: "ok", Value: 0}, {Key: "code", Value: code},
			{Key: "codeName", Value: name}, {Key: "message", Value: "m"}})
		err := errorFromAnswer(raw)
		var e *Error
		if !errors.As(err, &e) || e.Code != code || e.CodeName != name || !errors.Is(err, sentinels[code-1]) {
			t.Errorf("code %d: %v", code, err)
		}
		if errors.Is(err, &Error{Code: code + 100}) {
			t.Errorf("code %d is another code", code)
		}
	}
}

func TestContextEndsACall(t *testing.T) {
	c := admin(t)
	b := fresh(t, c, bson.M{"type": "fifo"})
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	err := b.Push(canceled, bson.M{"a": 1})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrTimeout) {
		t.Fatalf("a canceled context: %v", err)
	}
	past, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	if _, err := b.Length(past); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a deadline passed: %v", err)
	}
	// a deadline that ends while many calls wait: each hears of it, and the client carries on
	short, cancel3 := context.WithTimeout(context.Background(), 2*time.Millisecond)
	defer cancel3()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed, unknown int
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := b.Push(short, bson.M{"a": 1})
			var e *Error
			if errors.As(err, &e) {
				mu.Lock()
				failed++
				if e.OutcomeUnknown {
					unknown++
				}
				mu.Unlock()
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("not the context's error: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	n, err := b.Length(ctx(t))
	if err != nil {
		t.Fatalf("the client after calls ran out of time: %v", err)
	}
	if int(n) < 200-failed || int(n) > 200-failed+unknown {
		t.Errorf("%d pushes landed; %d failed, %d of them with an unknown outcome", n, failed, unknown)
	}
}

func TestClosedClient(t *testing.T) {
	c := connect(t, adminURL())
	c.Close()
	if _, err := c.Databases(ctx(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("a closed client: %v", err)
	}
}
