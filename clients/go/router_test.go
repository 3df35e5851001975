package hoarddb

// router_test.go holds the router's hashing to Python's byte for byte: testdata/partitions.json
// (written by testdata/partitions.py from hoarddb/routing.py and hoarddb/values/keys.py) gives
// keys of every type and requests of every verb, as BSON, with what Python makes of them.

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"math"
	"net"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"
)

type partitionVectors struct {
	Places map[string]placement `json:"places"`
	Keys   []struct {
		Name       string         `json:"name"`
		BSON       string         `json:"bson"`
		Key        string         `json:"key"`
		Partitions map[string]int `json:"partitions"`
	} `json:"keys"`
	Requests []struct {
		Place     string `json:"place"`
		BSON      string `json:"bson"`
		Partition *int   `json:"partition"`
	} `json:"requests"`
}

func readVectors(t *testing.T) partitionVectors {
	data, err := os.ReadFile("testdata/partitions.json")
	if err != nil {
		t.Fatal(err)
	}
	var v partitionVectors
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Keys) < 50 || len(v.Requests) < 50 {
		t.Fatalf("testdata/partitions.json holds %d keys and %d requests: too few", len(v.Keys), len(v.Requests))
	}
	return v
}

func rawOf(t *testing.T, hexText string) bson.Raw {
	data, err := hex.DecodeString(hexText)
	if err != nil {
		t.Fatal(err)
	}
	return bson.Raw(data)
}

func TestKeysEncodeAndHashAsPythons(t *testing.T) {
	for _, k := range readVectors(t).Keys {
		key := rawOf(t, k.BSON).Lookup("k")
		got, ok := encodeKey(nil, key)
		if !ok || hex.EncodeToString(got) != k.Key {
			t.Errorf("%s: key %x (ok %v), Python's %s", k.Name, got, ok, k.Key)
			continue
		}
		for count, want := range k.Partitions {
			n, _ := strconv.Atoi(count)
			if p, ok := partitionOf(key, n); !ok || p != want {
				t.Errorf("%s: partition %d of %d here, %d in Python", k.Name, p, n, want)
			}
		}
	}
}

// The Go values a program passes, marshalled as this client sends them, key as Python's do.
func TestGoValuesKeyAsPythons(t *testing.T) {
	keys := map[string]string{}
	for _, k := range readVectors(t).Keys {
		keys[k.Name] = k.Key
	}
	dec := func(s string) primitive.Decimal128 {
		d, err := primitive.ParseDecimal128(s)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	oid, _ := primitive.ObjectIDFromHex("65a1b2c3d4e5f60718293a4b")
	values := map[string][]interface{}{
		"string":          {"jane"},
		"unicode":         {"Zoë 🐘 東京"},
		"int32 30":        {30, int8(30), int32(30), int64(30), uint16(30), 30.0, float32(30), dec("30"), dec("30.000"), dec("3E+1")},
		"int32 -7":        {-7, int64(-7), -7.0},
		"double -0":       {math.Copysign(0, -1), 0, dec("-0")},
		"int64 2^53+1":    {int64(1<<53 + 1)},
		"int64 max":       {int64(math.MaxInt64)},
		"int64 min":       {int64(math.MinInt64)},
		"double 0.1":      {0.1},
		"decimal 19.99":   {dec("19.99")},
		"decimal 1E+6000": {dec("1E+6000")},
		"decimal NaN":     {dec("NaN"), math.NaN()},
		"double inf":      {math.Inf(1), dec("Infinity")},
		"objectid":        {oid},
		"binary":          {[]byte{0, 1, 0xfe, 0xff}, primitive.Binary{Data: []byte{0, 1, 0xfe, 0xff}}},
		"uuid":            {primitive.Binary{Subtype: 4, Data: mustHex(t, "0192a3b4c5d67890abcdef12345678a1")}},
		"bool true":       {true},
		"null":            {nil, primitive.Null{}},
		"date":            {time.Date(2024, 5, 17, 12, 30, 45, 123456789, time.UTC), primitive.DateTime(1715949045123)},
		"timestamp":       {primitive.Timestamp{T: 1700000000, I: 7}},
		"regex":           {primitive.Regex{Pattern: "^ab.c$", Options: "imx"}},
		"code":            {primitive.JavaScript("return 1")},
		"code with scope": {primitive.CodeWithScope{Code: "return x", Scope: bson.D{{Key: "x", Value: 1}}}},
		"minkey":          {primitive.MinKey{}},
		"maxkey":          {primitive.MaxKey{}},
		// (a bson.M of one field only: a Go map of two has no order, and a document's key follows its fields' order)
		"doc":                 {bson.D{{Key: "a", Value: 1}, {Key: "b", Value: "two"}}, struct{ A, B interface{} }{1, "two"}},
		"doc one field":       {bson.D{{Key: "a", Value: 1}}, bson.M{"a": int64(1)}},
		"doc nested":          {bson.D{{Key: "x", Value: bson.D{{Key: "y", Value: bson.A{1, 2.5, "z"}}}}, {Key: "n", Value: nil}}},
		"dbref":               {bson.D{{Key: "$id", Value: oid}, {Key: "$ref", Value: "Users"}}, primitive.DBPointer{DB: "Users", Pointer: oid}},
		"array":               {bson.A{1, "a", bson.A{true, nil}}, []interface{}{int64(1), "a", []interface{}{true, nil}}},
		"array empty":         {bson.A{}, []int{}},
		"string with NUL":     {"a\x00b"},
		"double -2.25e-300":   {-2.25e-300},
		"int64 -(2^53+1)":     {int64(-(1<<53 + 1))},
		"decimal -1E-6000":    {dec("-1E-6000")},
		"decimal Infinity":    {dec("Infinity")},
		"decimal -Infinity":   {dec("-Infinity"), math.Inf(-1)},
		"binary subtype 0x80": {primitive.Binary{Subtype: 0x80, Data: []byte{0x10, 0x20}}},
	}
	for name, vs := range values {
		want, ok := keys[name]
		if !ok {
			t.Fatalf("no vector named %q", name)
		}
		for _, v := range vs {
			rv, ok := value(v)
			got, ok2 := encodeKey(nil, rv)
			if !ok || !ok2 || hex.EncodeToString(got) != want {
				t.Errorf("%s: %#v keys as %x, Python's %s", name, v, got, want)
			}
		}
	}
}

func mustHex(t *testing.T, s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// asD is a request as the client holds it: a bson.D (here of raw values).
func asD(raw bson.Raw) bson.D {
	elems, _ := raw.Elements()
	out := bson.D{}
	for _, e := range elems {
		out = append(out, bson.E{Key: e.Key(), Value: e.Value()})
	}
	return out
}

func TestRequestsRouteAsPythons(t *testing.T) {
	v := readVectors(t)
	routedCount := 0
	for _, r := range v.Requests {
		raw := rawOf(t, r.BSON)
		doc := asD(raw)
		q, _ := readRequest(doc)
		got, _ := requestPartition(v.Places[r.Place], q, doc)
		want := -1
		if r.Partition != nil {
			want = *r.Partition
			routedCount++
		}
		if got != want {
			t.Errorf("%s: %s: partition %d here, Python's %d (-1: none)", r.Place, raw, got, want)
		}
	}
	if routedCount < 30 {
		t.Errorf("only %d requests have a partition", routedCount)
	}
}

// The vectors are Python's of now: testdata/partitions.py run again gives the same.
func TestPartitionVectorsAreCurrent(t *testing.T) {
	out, err := python("testdata/partitions.py").Output()
	if err != nil {
		t.Skipf("cannot run testdata/partitions.py (%v): the checked-in vectors are used as they are", err)
	}
	var now, kept interface{}
	data, _ := os.ReadFile("testdata/partitions.json")
	if json.Unmarshal(out, &now) != nil || json.Unmarshal(data, &kept) != nil || !reflect.DeepEqual(now, kept) {
		t.Errorf("testdata/partitions.json is not what testdata/partitions.py writes now; regenerate: " +
			"python testdata/partitions.py > testdata/partitions.json")
	}
}

func TestAnInsertWithoutKeyGetsOneFirst(t *testing.T) {
	place := placement{Type: "hash", Partitions: 16}
	doc := bson.D{{Key: "op", Value: "insert"}, {Key: "db", Value: "app"}, {Key: "bucket", Value: "B"},
		{Key: "args", Value: bson.D{{Key: "doc", Value: bson.D{{Key: "x", Value: 1}}}, {Key: "w", Value: 2}}}}
	q, _ := readRequest(doc)
	p, out := requestPartition(place, q, doc)
	args := out[3].Value.(bson.D)
	made := args[0].Value.(bson.D)
	key, _ := made[0].Value.(string)
	if made[0].Key != "_id_" || !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(key) {
		t.Fatalf("the made key is %v", made)
	}
	if want, _ := partitionOf(stringValue(key), 16); p != want || args[1].Key != "w" || made[1].Key != "x" {
		t.Errorf("partition %d of %s, want %d; args %v", p, key, want, args)
	}
	if len(doc[3].Value.(bson.D)[0].Value.(bson.D)) != 1 {
		t.Error("the caller's request was changed")
	}
	place.Type = "btree" // a btree entry sorts by its own first field: no key made
	p, out = requestPartition(place, q, doc)
	if _, err := out[3].Value.(bson.Raw).LookupErr("doc", "_id_"); p < 0 || err == nil {
		t.Errorf("btree insert: partition %d, request %v", p, out)
	}
}

func TestUUID7sIncrease(t *testing.T) {
	last := ""
	for i := 0; i < 10000; i++ {
		id := newUUID7()
		if id <= last {
			t.Fatalf("%s after %s", id, last)
		}
		last = id
	}
}

// A partitioned fifo's or lifo's owners take its pops, claims and peeks in turns, kept here: the
// owners this client can reach, by node id; a pop or a claim moves the turn on, a peek does not.
func TestAPartitionedQueueSTurnsGoOverItsOwnersInOrder(t *testing.T) {
	g := "g"
	nodes := map[string]nodeInfo{"n1": {}, "n2": {Address: "127.0.0.1:7002"}, "n3": {Address: "127.0.0.1:7003"},
		"n4": {}} // (n1, the URL's node, is reached without an address; n4 cannot be reached)
	owners := []string{"n3", "n1", "n4", "n2", "n3", "n1", "n2", "n4"}
	m := newClusterMap(map[string]placement{
		"Jobs":      {Type: "fifo", Partitions: 8, Group: &g, Owners: owners},
		"Stack":     {Type: "lifo", Partitions: 8, Group: &g, Owners: owners},
		"Heap":      {Type: "heap", Partitions: 8, Group: &g, Owners: owners},
		"Ungroup":   {Type: "fifo", Partitions: 8, Owners: owners},
		"One":       {Type: "fifo", Partitions: 1, Group: &g, Owners: []string{"n2"}},
		"Users":     {Type: "hash", Partitions: 8, Owners: owners},
		"Faraway":   {Type: "fifo", Partitions: 4, Group: &g, Owners: []string{"n4", "n1", "n4", "n1"}},
		"Elsewhere": {Type: "fifo", Partitions: 2, Group: &g, Owners: []string{"n3", "n3"}},
	}, nodes, "n1")
	for _, name := range []string{"Heap", "Ungroup", "One", "Users", "Faraway", "Elsewhere"} {
		if m.turns[name] != nil {
			t.Errorf("%s has turns: %v", name, m.turns[name].owners)
		}
	}
	for _, name := range []string{"Jobs", "Stack"} {
		turns := m.turns[name]
		if turns == nil || !reflect.DeepEqual(turns.owners, []string{"n1", "n2", "n3"}) {
			t.Fatalf("%s's turns: %+v", name, turns)
		}
		var got []string
		for _, write := range []bool{false, false, true, false, true, true, false, true, true} {
			got = append(got, turns.take(write))
		}
		want := []string{"n1", "n1", "n1", "n2", "n2", "n3", "n1", "n1", "n2"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: peek, peek, pop, peek, claim, pop, peek, pop, pop went to %v, not %v", name, got, want)
		}
	}
}

// turnsSetup is the options of a URL naming n1 (127.0.0.1:1, never dialled: its requests are not sent) and
// the address of a port nothing listens on, for an owner that cannot be reached.
func turnsSetup(t *testing.T) (*Options, string) {
	t.Helper()
	opts, err := ParseURL("hoarddb://127.0.0.1:1/?insecure=true&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0") // a port nothing listens on once closed
	if err != nil {
		t.Fatal(err)
	}
	defer closed.Close()
	return opts, closed.Addr().String()
}

// The router names the owner whose turn it is in the request's _turn: the URL's node's turn goes on
// the URL's connection, another owner's to that owner (here one that cannot be reached: then on the
// URL's connection too, still naming it). A store field's pop and a queue without turns get none.
func TestThePopsOfAPartitionedQueueNameTheirTurn(t *testing.T) {
	opts, address := turnsSetup(t)
	g := "g"
	r := newRouter(&Client{opts: opts})
	r.on, r.home = 1, "n1"
	r.maps["app"] = newClusterMap(map[string]placement{
		"Jobs":  {Type: "fifo", Partitions: 4, Group: &g, Owners: []string{"n2", "n1", "n2", "n1"}},
		"Plain": {Type: "fifo", Partitions: 1, Owners: []string{"n1"}}, // whole, the URL's node's
	}, map[string]nodeInfo{"n1": {Address: "127.0.0.1:1"}, "n2": {Address: address}}, "n1")
	request := func(op, bucket string, extra ...bson.E) bson.D {
		return append(bson.D{{Key: "op", Value: op}, {Key: "db", Value: "app"}, {Key: "bucket", Value: bucket},
			{Key: "args", Value: bson.D{}}}, extra...)
	}
	turnOf := func(doc bson.D) string {
		for _, e := range doc {
			if e.Key == "_turn" {
				return e.Value.(string)
			}
		}
		return ""
	}
	ctx := context.Background()
	for i, step := range []struct {
		doc  bson.D
		turn string
	}{
		{request("peek", "Jobs"), "n1"},
		{request("pop", "Jobs"), "n1"},
		{request("pop", "Jobs", bson.E{Key: "field", Value: "Tasks"}, bson.E{Key: "key", Value: "k"}), ""},
		{request("pop", "Plain"), ""},
		{request("peek", "Jobs"), "n2"}, // n2's turn, but n2 cannot be reached: the URL's node starts there
	} {
		_, err, out, done := r.do(ctx, step.doc[0].Value.(string), step.doc)
		if err != nil || done || turnOf(out) != step.turn {
			t.Fatalf("step %d (%v): sent %v (done %v, %v), want _turn %q", i, step.doc, out, done, err, step.turn)
		}
		if turnOf(step.doc) != "" {
			t.Errorf("step %d: the caller's request was changed: %v", i, step.doc)
		}
	}
	if _, ok := r.unreachable["n2"]; !ok {
		t.Errorf("n2 was not tried: %v", r.unreachable)
	}
}

func TestAWholeQueueSPopsGoToItsOwner(t *testing.T) {
	opts, address := turnsSetup(t)
	r := newRouter(&Client{opts: opts})
	r.on, r.home = 1, "n1"
	r.maps["app"] = newClusterMap(map[string]placement{
		"Here":  {Type: "fifo", Partitions: 1, Owners: []string{"n1"}},
		"There": {Type: "fifo", Partitions: 1, Owners: []string{"n2"}},
	}, map[string]nodeInfo{"n1": {Address: "127.0.0.1:1"}, "n2": {Address: address}}, "n1")
	ctx := context.Background()
	pop := func(bucket string) bson.D {
		return bson.D{{Key: "op", Value: "pop"}, {Key: "db", Value: "app"}, {Key: "bucket", Value: bucket},
			{Key: "args", Value: bson.D{}}}
	}
	if _, err, _, done := r.do(ctx, "pop", pop("Here")); err != nil || done || len(r.unreachable) != 0 {
		t.Fatalf("a pop of a queue the URL's node owns went elsewhere: done %v, %v, tried %v", done, err, r.unreachable)
	}
	if _, err, _, done := r.do(ctx, "pop", pop("There")); err != nil || done {
		t.Fatalf("done %v, %v", done, err)
	}
	if _, ok := r.unreachable["n2"]; !ok {
		t.Errorf("the pop of a queue n2 owns was not sent to n2: %v", r.unreachable)
	}
}
