package hoarddb

// cluster_test.go runs the router against a real cluster when tests/cluster/test_go_routing.py
// starts one and names it (HOARDDB_CLUSTER_URL: a node's URL; HOARDDB_CLUSTER_PHASE: what to
// do), and is skipped otherwise. The Python side reads the nodes' metrics and local buckets.
// Against a single server, the router stays off.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/bson"
)

func clusterURL(t *testing.T, phase string) string {
	url := os.Getenv("HOARDDB_CLUSTER_URL")
	if url == "" || os.Getenv("HOARDDB_CLUSTER_PHASE") != phase {
		t.Skip("no cluster: tests/cluster/test_go_routing.py runs this with HOARDDB_CLUSTER_URL and HOARDDB_CLUSTER_PHASE=" + phase)
	}
	return url
}

func TestASingleServerIsNotRouted(t *testing.T) {
	ctx := context.Background()
	c, err := Connect(ctx, insecureServer.url("", "insecure=true"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, err := c.Database("goroute").CreateBucket(ctx, "Users", bson.D{{Key: "type", Value: "hash"}})
	if err != nil && !errors.Is(err, ErrBucketExists) {
		t.Fatal(err)
	}
	b = c.Database("goroute").Bucket("Users")
	if _, err := b.Insert(ctx, bson.D{{Key: "_id_", Value: "a"}}); err != nil && !errors.Is(err, ErrDuplicateKey) {
		t.Fatal(err)
	}
	if found, err := b.Get(ctx, "a", &bson.M{}); err != nil || !found {
		t.Fatal(found, err)
	}
	if c.router == nil || c.router.enabled() || len(c.router.peers) != 0 || len(c.router.maps) != 0 {
		t.Errorf("a single server's client routes: %+v", c.router)
	}
	any, err := Connect(ctx, insecureServer.url("", "insecure=true&route=any"))
	if err != nil {
		t.Fatal(err)
	}
	defer any.Close()
	if any.router != nil {
		t.Error("route=any keeps a router")
	}
}

// TestClusterKeyedRequestsGoToTheirOwner does keyed work of every kind through the URL's node; the
// Python side checks that the node forwarded none (route=owner) or every one it does not own (route=any).
func TestClusterKeyedRequestsGoToTheirOwner(t *testing.T) {
	url := clusterURL(t, "owner")
	ctx := context.Background()
	c, err := Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	name := os.Getenv("HOARDDB_CLUSTER_DB")
	if name == "" {
		name = "app"
	}
	db := c.Database(name)
	users, scores, jobs := db.Bucket("Users"), db.Bucket("Scores"), db.Bucket("Jobs")
	for i := 0; i < 40; i++ {
		k := fmt.Sprintf("go%02d", i)
		if _, err := users.Insert(ctx, bson.D{{Key: "_id_", Value: k}, {Key: "n", Value: 1}}); err != nil {
			t.Fatal(err)
		}
		var got bson.M
		if found, err := users.Get(ctx, k, &got); err != nil || !found || got["n"] != int32(1) {
			t.Fatalf("get %s: %v %v %v", k, got, found, err)
		}
		if r, err := users.Update(ctx, bson.D{{Key: "_id_", Value: k}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}); err != nil || r.Matched != 1 {
			t.Fatalf("update %s: %+v %v", k, r, err)
		}
		if ok, err := users.Exists(ctx, k); err != nil || !ok {
			t.Fatalf("exists %s: %v %v", k, ok, err)
		}
		if _, err := scores.Insert(ctx, bson.D{{Key: "Score", Value: i}, {Key: "N", Value: i}}); err != nil {
			t.Fatal(err)
		}
		if err := jobs.Push(ctx, bson.D{{Key: "g", Value: fmt.Sprintf("t%d", i%8)}, {Key: "n", Value: i}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 10; i++ { // without a key: one is made here, so that its owner is known
		if _, err := users.Insert(ctx, bson.D{{Key: "made", Value: true}}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := users.Delete(ctx, bson.D{{Key: "_id_", Value: "go00"}}); err != nil || n != 1 {
		t.Fatalf("delete: %d %v", n, err)
	}
	var got bson.M
	if found, err := scores.Get(ctx, bson.D{{Key: "Score", Value: 7}}, &got); err != nil || !found || got["N"] != int32(7) {
		t.Fatalf("scores get: %v %v %v", got, found, err)
	}
	if route := c.opts.Route; route == "any" && c.router != nil {
		t.Error("route=any keeps a router")
	} else if route != "any" {
		c.router.mu.Lock()
		peers := len(c.router.peers)
		c.router.mu.Unlock()
		if peers != 1 {
			t.Errorf("%d pools to other nodes, not 1", peers)
		}
	}
}

// TestClusterDuringMoves writes and reads keyed documents through the URL's node until the file
// HOARDDB_CLUSTER_STOP exists (the Python side adds and removes nodes meanwhile), then reads every
// acknowledged one back, twice, and writes their keys to HOARDDB_CLUSTER_ACKED.
func TestClusterDuringMoves(t *testing.T) {
	url := clusterURL(t, "moves")
	mapAge = time.Second // (as the Python test does: the map is read again within a second)
	ctx := context.Background()
	c, err := Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	users := c.Database("app").Bucket("Users")
	stop := os.Getenv("HOARDDB_CLUSTER_STOP")
	var mu sync.Mutex
	var acked []string
	var failures []string
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				if _, err := os.Stat(stop); err == nil || i > 100000 {
					return
				}
				k := fmt.Sprintf("w%d-%05d", w, i)
				_, err := users.Insert(ctx, bson.D{{Key: "_id_", Value: k}, {Key: "n", Value: 1}})
				if err == nil {
					var got bson.M
					var found bool
					found, err = users.Get(ctx, k, &got)
					if err == nil && !found {
						err = fmt.Errorf("%s acknowledged, then not found", k)
					}
				}
				mu.Lock()
				if err != nil {
					failures = append(failures, fmt.Sprintf("%s: %v", k, err))
				} else {
					acked = append(acked, k)
				}
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}(w)
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Errorf("%d of %d requests failed during the moves; first: %s", len(failures), len(failures)+len(acked), failures[0])
	}
	readBack := func() {
		for _, k := range acked {
			var got bson.M
			if found, err := users.Get(ctx, k, &got); err != nil || !found {
				t.Errorf("%s: acknowledged, then %v %v", k, found, err)
			}
		}
	}
	time.Sleep(mapAge + 100*time.Millisecond)
	readBack() // (the map read again: the moves are over)
	// then once more, between HOARDDB_CLUSTER_READY and HOARDDB_CLUSTER_GO, for the Python side
	// to see that every get went to its owner on the map of after the moves
	if err := os.WriteFile(os.Getenv("HOARDDB_CLUSTER_READY"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(os.Getenv("HOARDDB_CLUSTER_GO")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("HOARDDB_CLUSTER_GO never came")
		}
	}
	readBack()
	f, err := os.Create(os.Getenv("HOARDDB_CLUSTER_ACKED"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	_, _ = w.WriteString(strings.Join(acked, "\n"))
	_ = w.Flush()
	t.Logf("%d documents written and read back during the moves", len(acked))
}

// step tells the Python side this test reached name (the file HOARDDB_CLUSTER_SYNC/name.ready)
// and waits until it did its part (name.go).
func step(t *testing.T, name string) {
	t.Helper()
	dir := os.Getenv("HOARDDB_CLUSTER_SYNC")
	if err := os.WriteFile(filepath.Join(dir, name+".ready"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, name+".go")); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Python side never finished %s", name)
		}
	}
}

// TestClusterNodeDown reads documents of both nodes through the URL's node (n1) while the Python
// side kills the other owner (n2) and starts it again: n2's reads fall back to n1, which says n2 is
// unavailable; n1's are served; once n2 is back, its reads go to it again.
func TestClusterNodeDown(t *testing.T) {
	url := clusterURL(t, "down")
	mapAge = time.Second
	ctx := context.Background()
	c, err := Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	users := c.Database("app").Bucket("Users")
	theirs := strings.Split(os.Getenv("HOARDDB_CLUSTER_THEIRS"), ",")
	mine := strings.Split(os.Getenv("HOARDDB_CLUSTER_MINE"), ",")
	get := func(k string) error {
		var got bson.M
		found, err := users.Get(ctx, k, &got)
		if err == nil && (!found || got["_id_"] != k) {
			err = fmt.Errorf("%s: found %v, %v", k, found, got)
		}
		return err
	}
	for _, k := range append(append([]string{}, theirs...), mine...) {
		if err := get(k); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := c.router.peers["n2"]; !ok {
		t.Fatalf("no pool to n2: %v", c.router.peers)
	}
	step(t, "kill")
	err = get(theirs[0])
	var e *Error
	if !errors.As(err, &e) || e.Code != 34 || !strings.Contains(e.Message, "n2") || e.OutcomeUnknown {
		t.Fatalf("a read of n2's while n2 is down: %v", err)
	}
	for _, k := range mine {
		if err := get(k); err != nil {
			t.Fatal(err)
		}
	}
	step(t, "restart")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if err = get(theirs[0]); err == nil {
			break
		}
		if !errors.Is(err, ErrPartitionUnavailable) || time.Now().After(deadline) {
			t.Fatalf("n2 back: %v", err)
		}
	}
	time.Sleep(2*mapAge + 200*time.Millisecond) // (the map read again, the pool to n2 open again)
	for _, k := range theirs {
		if err := get(k); err != nil {
			t.Fatal(err)
		}
	}
	step(t, "routed") // the Python side notes n1's forwards
	for _, k := range theirs {
		if err := get(k); err != nil {
			t.Fatal(err)
		}
	}
}

// TestClusterQueueTurns pushes to a partitioned fifo (app.GoTurns) four elements of each group of
// HOARDDB_CLUSTER_GROUPS (groups of both owners), then, between the steps "pushed" and "taken" (the
// Python side notes the nodes' forwards), peeks and pops six times and claims two while both owners
// hold elements: each goes to the owner whose turn it is. Then it acks the claims, pops the rest, and
// writes each element it took, in order, to HOARDDB_CLUSTER_TAKEN ("popped g n" or "claimed g n").
func TestClusterQueueTurns(t *testing.T) {
	url := clusterURL(t, "turns")
	defer func(age time.Duration) { mapAge = age }(mapAge)
	mapAge = time.Minute // (one map, read at the first push: its turns are not started again meanwhile)
	ctx := context.Background()
	c, err := Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := c.Database("app").Bucket("GoTurns")
	groups := strings.Split(os.Getenv("HOARDDB_CLUSTER_GROUPS"), ",")
	for n := 0; n < 4; n++ {
		for _, g := range groups {
			if err := q.Push(ctx, bson.D{{Key: "g", Value: g}, {Key: "n", Value: n}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	type element struct {
		G string `bson:"g"`
		N int    `bson:"n"`
	}
	var taken []string
	step(t, "pushed")
	for i := 0; i < 6; i++ {
		var peeked, popped element
		if found, err := q.Peek(ctx, &peeked); err != nil || !found {
			t.Fatalf("peek %d: %v %v", i, found, err)
		}
		if found, err := q.Pop(ctx, &popped); err != nil || !found {
			t.Fatalf("pop %d: %v %v", i, found, err)
		}
		if peeked != popped {
			t.Errorf("peek %d showed %+v, the pop after it took %+v", i, peeked, popped)
		}
		taken = append(taken, fmt.Sprintf("popped %s %d", popped.G, popped.N))
	}
	claims, err := q.Claim(ctx, ClaimOptions{Limit: 2})
	if err != nil || len(claims) != 2 {
		t.Fatalf("claim: %v %v", claims, err)
	}
	ids := []string{}
	for _, claim := range claims {
		var e element
		if err := claim.Decode(&e); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, claim.ClaimID)
		taken = append(taken, fmt.Sprintf("claimed %s %d", e.G, e.N))
	}
	step(t, "taken") // the Python side compares the nodes' forwards with those at "pushed"
	if n, err := q.Ack(ctx, ids...); err != nil || n != 2 {
		t.Fatalf("ack: %d %v", n, err)
	}
	for {
		var e element
		found, err := q.Pop(ctx, &e)
		if err != nil {
			t.Fatal(err)
		}
		if !found {
			break
		}
		taken = append(taken, fmt.Sprintf("popped %s %d", e.G, e.N))
	}
	c.router.mu.Lock()
	peers := len(c.router.peers)
	c.router.mu.Unlock()
	if peers != 1 {
		t.Errorf("%d pools to other nodes, not 1", peers)
	}
	if err := os.WriteFile(os.Getenv("HOARDDB_CLUSTER_TAKEN"), []byte(strings.Join(taken, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
}
