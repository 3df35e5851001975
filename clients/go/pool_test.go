package hoarddb

// pool_test.go: many goroutines on one client, and a server restart under it.

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/bson"
)

func TestConcurrentGoroutines(t *testing.T) {
	for _, pool := range []int{1, 4} {
		t.Run(fmt.Sprintf("pool_size=%d", pool), func(t *testing.T) {
			c := connect(t, adminURL()+fmt.Sprintf("&pool_size=%d", pool))
			q := fresh(t, c, bson.M{"type": "fifo"})
			h := fresh(t, c, bson.D{{Key: "type", Value: "hash"}, {Key: "placement", Value: "whole"},
				{Key: "indices", Value: bson.A{bson.M{"field": "Email", "unique": true}}}})
			const goroutines, each = 16, 100
			var wg sync.WaitGroup
			errs := make(chan error, goroutines*each)
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					for i := 0; i < each; i++ {
						if err := q.Push(ctx(t), bson.M{"g": g, "i": i}); err != nil {
							errs <- err
						}
						key := fmt.Sprintf("%d-%d", g, i)
						if _, err := h.Insert(ctx(t), bson.M{"_id_": key, "Email": key + "@x"}); err != nil {
							errs <- err
						}
						var got bson.M
						if ok, err := h.Get(ctx(t), key, &got); err != nil || !ok || got["Email"] != key+"@x" {
							errs <- fmt.Errorf("read own write %s: %v %v", key, got, err)
						}
						// every goroutine races for the same unique value: one wins
						_, err := h.Insert(ctx(t), bson.M{"_id_": key + "x", "Email": fmt.Sprintf("shared-%d@x", i)})
						if err != nil && !errors.Is(err, ErrDuplicateKey) {
							errs <- err
						}
					}
				}(g)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if n, _ := q.Length(ctx(t)); n != goroutines*each {
				t.Fatalf("length %d, want %d", n, goroutines*each)
			}
			if n, _ := h.Count(ctx(t), nil); n != goroutines*each+each {
				t.Fatalf("count %d, want %d (each shared value held once)", n, goroutines*each+each)
			}
			// each goroutine's pushes arrive in its order
			var all []struct{ G, I int }
			if err := q.PopN(ctx(t), 100, &all); err != nil {
				t.Fatal(err)
			}
			last := map[int]int{}
			for _, e := range all {
				if prev, seen := last[e.G]; seen && e.I <= prev {
					t.Fatalf("goroutine %d's pushes out of order: %d after %d", e.G, e.I, prev)
				}
				last[e.G] = e.I
			}
		})
	}
}

func TestServerRestartMidUse(t *testing.T) {
	s, err := startServer(filepath.Join(t.TempDir(), "restart"), false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	c := connect(t, s.url("admin:s3cret%20pass", "tls_fingerprint="+s.fingerprint+"&pool_size=2"))
	q := fresh(t, c, bson.M{"type": "lifo"})
	for i := 0; i < 10; i++ {
		if err := q.Push(ctx(t), bson.M{"i": i}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.restart(); err != nil {
		t.Fatal(err)
	}
	// every connection of the pool was closed by the restart: calls open new ones
	for i := 0; i < 4; i++ {
		if n, err := q.Length(ctx(t)); err != nil || n != 10 {
			t.Fatalf("a read after the restart: %d %v", n, err)
		}
	}
	if err := q.Push(ctx(t), bson.M{"i": 10}); err != nil {
		t.Fatalf("a write after the restart: %v", err)
	}
	var top bson.M
	if ok, err := q.Peek(ctx(t), &top); err != nil || !ok || top["i"] != int32(10) {
		t.Fatalf("peek after the restart: %v %v", top, err)
	}

	// a restart while goroutines read and write: reads are resent on a new connection; a
	// write whose answer was lost says so (OutcomeUnknown), and one refused before it was
	// sent is plainly an error of connection
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var mu sync.Mutex
	var otherErrors []error
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				if g%2 == 0 {
					_, err = q.Length(ctx(t))
				} else {
					err = q.Push(ctx(t), bson.M{"g": g})
				}
				var e *Error
				if err != nil && !(errors.As(err, &e) && (e.Code == 29 || e.Code == 30)) {
					mu.Lock()
					otherErrors = append(otherErrors, err)
					mu.Unlock()
				}
			}
		}(g)
	}
	if err := s.restart(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	for _, err := range otherErrors {
		t.Errorf("during the restart, an error that is not of the connection: %v", err)
	}
	if _, err := q.Length(ctx(t)); err != nil {
		t.Fatalf("after the second restart: %v", err)
	}
}
