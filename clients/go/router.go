package hoarddb

// router.go owns routing by owner against a cluster: the client's copy of the cluster's map
// (the cluster_map operation), each keyed request's partition computed exactly as the nodes
// and the Python clients compute it (hoarddb/routing.py, over hoardDB's key encoding,
// hoarddb/values/keys.py), and a pool of connections to each node that keyed requests go to.
//
// Against a cluster, a node forwards a request whose partition it does not own to the owner:
// correct, but the entry node pays about as much for it as the owner. So, as the Python
// clients do (hoarddb/client/router.py), this client reads the map and sends each keyed
// request straight to its partition's owner:
//
//	keyed requests      get, exists, info by key; insert, put by the document's _id_ (an
//	                    insert without one gets a UUIDv7 made here, as a node would make
//	                    it); update, delete, find_and_modify, count by {_id_: k}; a
//	                    partitioned queue's push by its group; a store field's verbs by
//	                    their document's key
//	turns               a partitioned fifo's or lifo's pop, claim and peek: to its owners in
//	                    turn (this client's turns, each pop or claim one further), naming
//	                    the owner in _turn: it takes from its own partitions first, and asks
//	                    the others only for what they lack; a whole queue's: to its owner
//	everything else     batches, reads over many documents, cursors, streams and uploads,
//	                    the catalog: the URL's node, as before
//
// A database's map is read on its first keyed request, and again when it is older than
// mapAge (downAge when it names an owner that is down), when an owner's connection fails,
// and when a node refuses a request as PARTITION_UNAVAILABLE with moved (the request is then
// sent to the URL's node). A map out of date costs a forward, never a wrong answer: a node
// passes on what it does not own. route=any, or a server that is no cluster, keeps every
// request on the URL's node. The URL's node is the server that answered: when the URL names
// several (hoarddb://h1:7070,h2:7070/) and the first is down, it is the one reached after it,
// as the hello of that connection names it.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"math/big"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/bsontype"
	"golang.org/x/crypto/blake2b"
)

var (
	// mapAge is how long a database's map is trusted before the next keyed request reads it again.
	mapAge = 5 * time.Second
	// downAge is the same, for a map that names as an owner a node that is not among the live ones.
	downAge = 1 * time.Second
)

// router is one client's copy of a cluster's maps, by database, and its connections to the nodes.
type router struct {
	client *Client
	on     int32 // 1 when keyed requests go to their owners: route=owner and the URL's server is a node

	mu          sync.Mutex
	home        string                 // the node the URL's connection reached, as its hello said
	maps        map[string]*clusterMap // by database
	unreachable map[string]time.Time   // when a connection to a node last could not be opened
	peers       map[string]*Client     // a pool per node, by node id
	reading     sync.Mutex             // one map read at a time
}

// clusterMap is what cluster_map answered for one database.
type clusterMap struct {
	read    time.Time
	down    bool // an owner is missing from nodes
	buckets map[string]placement
	nodes   map[string]nodeInfo
	turns   map[string]*turns // a partitioned fifo's or lifo's, by bucket
}

// newClusterMap is the map of buckets and nodes cluster_map answered, read against home (the URL's node).
func newClusterMap(buckets map[string]placement, nodes map[string]nodeInfo, home string) *clusterMap {
	m := &clusterMap{read: time.Now(), buckets: buckets, nodes: nodes, turns: map[string]*turns{}}
	for name, place := range buckets {
		for _, owner := range place.Owners {
			if _, ok := nodes[owner]; !ok {
				m.down = true
			}
		}
		if t := newTurns(place, nodes, home); t != nil {
			m.turns[name] = t
		}
	}
	return m
}

// turns are a partitioned fifo's or lifo's owners this client can send to (the URL's node, and any
// node the map gives an address), in the order the nodes take turns over them (by node id), and
// where the next pop or claim starts (hoarddb/client/router.py's _Bucket.next_turn).
type turns struct {
	owners []string
	next   uint64 // (atomic) pops and claims taken so far
}

// newTurns are a bucket's turns, or nil when it has none: not a fifo or lifo with a group field
// and partitions, or fewer than two owners to take turns over (the URL's node then keeps them).
func newTurns(place placement, nodes map[string]nodeInfo, home string) *turns {
	if place.Group == nil || place.Partitions <= 1 || (place.Type != "fifo" && place.Type != "lifo") {
		return nil
	}
	t := &turns{}
	seen := map[string]bool{}
	for _, owner := range place.Owners {
		if !seen[owner] && (owner == home || nodes[owner].Address != "") {
			t.owners = append(t.owners, owner)
		}
		seen[owner] = true
	}
	if len(t.owners) < 2 {
		return nil
	}
	sort.Strings(t.owners) // (byte order: the code point order the nodes sort node ids in)
	return t
}

// take is the owner whose turn a pop, claim or peek is: a pop or a claim (write) moves the turn on
// by one, a peek looks where the next one starts.
func (t *turns) take(write bool) string {
	var i uint64
	if write {
		i = atomic.AddUint64(&t.next, 1) - 1
	} else {
		i = atomic.LoadUint64(&t.next)
	}
	return t.owners[i%uint64(len(t.owners))]
}

// soleOwner is the one node owning every partition of a bucket (a whole queue's owner), or "".
func soleOwner(owners []string) string {
	if len(owners) == 0 {
		return ""
	}
	for _, o := range owners[1:] {
		if o != owners[0] {
			return ""
		}
	}
	return owners[0]
}

// withTurn is doc naming owner in _turn (the node that takes from its own partitions first).
func withTurn(doc bson.D, owner string) bson.D {
	out := make(bson.D, 0, len(doc)+1)
	for _, e := range doc {
		if e.Key != turnField {
			out = append(out, e)
		}
	}
	return append(out, bson.E{Key: turnField, Value: owner})
}

// turnField is the request field naming the owner a partitioned queue's pop, claim or peek starts
// at (hoarddb/routing.py TURN_FIELD).
const turnField = "_turn"

// placement is one bucket's entry of the map.
type placement struct {
	Type       string   `bson:"type"`
	Partitions int      `bson:"partitions"`
	Key        *string  `bson:"key"`   // a btree's sort field
	Group      *string  `bson:"group"` // a partitioned queue's group field
	Owners     []string `bson:"owners"`
	Version    int64    `bson:"version"`
}

type nodeInfo struct {
	Address     string `bson:"address"`
	Fingerprint string `bson:"fingerprint"`
}

func newRouter(c *Client) *router {
	return &router{client: c, maps: map[string]*clusterMap{}, unreachable: map[string]time.Time{},
		peers: map[string]*Client{}}
}

// connected notes the hello of a connection to the URL's server: a cluster node names itself
// (node), and only then are keyed requests routed.
func (r *router) connected(info bson.Raw) {
	node, _ := info.Lookup("node").StringValueOK()
	r.mu.Lock()
	r.home = node
	r.mu.Unlock()
	on := int32(0)
	if r.client.opts.Route != "any" && node != "" {
		on = 1
	}
	atomic.StoreInt32(&r.on, on)
}

func (r *router) enabled() bool { return r != nil && atomic.LoadInt32(&r.on) == 1 }

// forget makes the next keyed request of db read its map again.
func (r *router) forget(db string) {
	r.mu.Lock()
	delete(r.maps, db)
	r.mu.Unlock()
}

// close closes the connections to the other nodes.
func (r *router) close() {
	r.mu.Lock()
	peers := r.peers
	r.peers = map[string]*Client{}
	r.mu.Unlock()
	for _, p := range peers {
		p.Close()
	}
}

// request is what routing reads of one request document.
type request struct {
	op       string
	db       string
	bucket   string
	field    bool // a store field's verb (the request names key and field)
	key      interface{}
	hasKey   bool
	argsAt   int // the index of args in the document, or -1
	internal bool
}

func readRequest(doc bson.D) (request, bool) {
	q := request{argsAt: -1}
	dbOK, bucketOK := false, false
	for i, e := range doc {
		switch e.Key {
		case "op":
			q.op, _ = text(e.Value)
		case "db":
			q.db, dbOK = text(e.Value)
		case "bucket":
			q.bucket, bucketOK = text(e.Value)
		case "field":
			q.field = true
		case "key":
			q.key, q.hasKey = e.Value, true
		case "args":
			q.argsAt = i
		case "_node":
			q.internal = true
		}
	}
	return q, dbOK && bucketOK && !q.internal
}

// text is a string value (a Go string, or a raw BSON one).
func text(v interface{}) (string, bool) {
	if s, ok := v.(string); ok {
		return s, true
	}
	if rv, ok := v.(bson.RawValue); ok {
		return rv.StringValueOK()
	}
	return "", false
}

// routed is whether an operation may go to its owner: it acts on one document (a key parameter)
// or adds one (a push), and its answer never comes through a cursor.
func routed(op string) bool {
	entry, ok := operations[op]
	return ok && !entry.cursor && (entry.keyParam != "" || entry.pushes)
}

// do sends a keyed request to its partition's owner when that is another node than the URL's,
// and a partitioned fifo's or lifo's pop, claim or peek to the owner whose turn it is, named in
// _turn. done is false when the request goes on the URL's connection after all (not keyed, no
// map, the owner is this node, down or unreachable, or it refused the request as moved); out is
// the request to send there (an insert may have been given its key, a pop its _turn).
func (r *router) do(ctx context.Context, op string, doc bson.D) (a Answer, err error, out bson.D, done bool) {
	q, ok := readRequest(doc)
	turn := !q.field && operations[op].turns
	if !ok || !(q.field || routed(op) || turn) {
		return Answer{}, nil, doc, false
	}
	if err := r.readMap(ctx, q.db); err != nil {
		return Answer{}, err, doc, true
	}
	r.mu.Lock()
	m := r.maps[q.db]
	home := r.home
	r.mu.Unlock()
	if m == nil {
		return Answer{}, nil, doc, false
	}
	place, ok := m.buckets[q.bucket]
	if !ok {
		return Answer{}, nil, doc, false
	}
	var owner string
	if turn {
		if t := m.turns[q.bucket]; t != nil {
			owner = t.take(operations[op].write)
			doc = withTurn(doc, owner)
		} else if owner = soleOwner(place.Owners); owner == "" { // no turns: the URL's node keeps them
			return Answer{}, nil, doc, false
		}
	} else {
		var p int
		p, doc = requestPartition(place, q, doc)
		if p < 0 || p >= len(place.Owners) {
			return Answer{}, nil, doc, false
		}
		owner = place.Owners[p]
	}
	if owner == home {
		return Answer{}, nil, doc, false
	}
	info, ok := m.nodes[owner]
	if !ok || info.Address == "" {
		return Answer{}, nil, doc, false // down: the URL's node answers PARTITION_UNAVAILABLE naming it
	}
	peer := r.peer(ctx, owner, info, q.db)
	if peer == nil {
		return Answer{}, nil, doc, false
	}
	a, err, done = r.send(ctx, peer, owner, op, q.db, doc)
	return a, err, doc, done
}

// readMap reads db's map on the URL's connection when it has none or its map is old.
func (r *router) readMap(ctx context.Context, db string) error {
	if !r.stale(db) {
		return nil
	}
	r.reading.Lock()
	defer r.reading.Unlock()
	if !r.stale(db) { // another goroutine read it meanwhile
		return nil
	}
	a, err := r.client.direct(ctx, "cluster_map", bson.D{{Key: "op", Value: "cluster_map"}, {Key: "db", Value: db}})
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.Code == 11 { // a server older than the map: requests go as before
			r.mu.Lock()
			r.maps[db] = &clusterMap{read: time.Now()}
			r.mu.Unlock()
			return nil
		}
		if errors.As(err, &e) && (e.Code == 29 || e.Code == 30) {
			return nil // the request goes on the URL's connection, which says what became of it
		}
		return err // (no role on the database, a revoked login: the request's own error)
	}
	var answer struct {
		Cluster bool                 `bson:"cluster"`
		Buckets map[string]placement `bson:"buckets"`
		Nodes   map[string]nodeInfo  `bson:"nodes"`
	}
	if err := a.Decode(&answer); err != nil || !answer.Cluster {
		atomic.StoreInt32(&r.on, 0) // no cluster after all: nothing is routed
		r.mu.Lock()
		r.maps = map[string]*clusterMap{}
		r.mu.Unlock()
		return nil
	}
	r.mu.Lock()
	r.maps[db] = newClusterMap(answer.Buckets, answer.Nodes, r.home)
	r.mu.Unlock()
	return nil
}

func (r *router) stale(db string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.maps[db]
	if m == nil {
		return true
	}
	age := mapAge
	if m.down {
		age = downAge
	}
	return time.Since(m.read) > age
}

// peer is the pool of connections to node (opened on first use, with the URL's options, its host
// and port replaced), or nil when it cannot be opened (then tried again after mapAge).
func (r *router) peer(ctx context.Context, node string, info nodeInfo, db string) *Client {
	r.mu.Lock()
	p := r.peers[node]
	failed, tried := r.unreachable[node]
	r.mu.Unlock()
	if tried && time.Since(failed) < mapAge {
		return nil // a node that could not be reached costs one attempt, not one a call
	}
	if p != nil && p.opts.address() == info.Address && atomic.LoadInt32(&p.closed) == 0 {
		return p
	}
	o, err := r.peerOptions(info)
	if err == nil {
		p, err = ConnectOptions(ctx, o)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if ended(ctx) { // the caller gave up, not the node: the URL's connection says so
			return nil
		}
		r.unreachable[node] = time.Now()
		delete(r.maps, db)
		return nil
	}
	delete(r.unreachable, node)
	if old := r.peers[node]; old != nil {
		if old.opts.address() == info.Address && atomic.LoadInt32(&old.closed) == 0 {
			go p.Close() // another goroutine opened one meanwhile
			return old
		}
		go old.Close() // the node moved to another address
	}
	if atomic.LoadInt32(&r.client.closed) == 1 {
		go p.Close()
		return nil
	}
	r.peers[node] = p
	return p
}

// peerOptions are the URL's options with the node's host and port, and no other servers to try
// (and, when the URL pins a certificate, the node's own, as the map gave it over a connection
// that was itself pinned).
func (r *router) peerOptions(info nodeInfo) (*Options, error) {
	host, port, err := net.SplitHostPort(info.Address)
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return nil, err
	}
	o := *r.client.opts
	o.Host, o.Port, o.Route, o.Others = host, n, "any", nil
	if o.TLSFingerprint != "" && info.Fingerprint != "" {
		o.TLSFingerprint = info.Fingerprint
	}
	return &o, nil
}

// send runs a request on the owner's pool. done is false when it is to go to the URL's node
// instead: nothing was sent, a read whose connection failed, or a refusal as moved.
func (r *router) send(ctx context.Context, peer *Client, node, op, db string, doc bson.D) (Answer, error, bool) {
	entry := operations[op]
	cn, err := peer.shared(ctx)
	if err != nil {
		if ended(ctx) {
			return Answer{}, contextError(ctx), true
		}
		r.mu.Lock()
		r.unreachable[node] = time.Now()
		delete(r.maps, db)
		r.mu.Unlock()
		return Answer{}, nil, false // nothing was sent: the URL's node forwards it (or says the owner is down)
	}
	cn.busy(1)
	raw, sent, err := cn.roundTrip(ctx, doc)
	cn.busy(-1)
	if err == nil {
		if ok, _ := raw.Lookup("ok").AsInt64OK(); ok != 1 {
			if code, _ := raw.Lookup("code").AsInt64OK(); code == 34 {
				if moved, _ := raw.Lookup("details", "moved").BooleanOK(); moved {
					r.forget(db) // refused, nothing applied: the map changed meanwhile
					return Answer{}, nil, false
				}
			}
			return Answer{}, errorFromAnswer(raw), true
		}
		return Answer{Raw: raw}, nil, true
	}
	var e *Error
	if !errors.As(err, &e) {
		return Answer{}, err, true
	}
	if ended(ctx) {
		return Answer{}, unanswered(contextError(ctx), op, entry.write && sent), true
	}
	r.forget(db)
	if !sent {
		return Answer{}, nil, false
	}
	if e.Code == 30 || !entry.retry {
		// a write whose answer was lost is never sent twice; a silent node is not asked again
		return Answer{}, unanswered(e, op, entry.write), true
	}
	return Answer{}, nil, false // a read: once more, on the URL's connection
}

// ---------------------------------------------------------------------------------------------
// the partition of a request: hoarddb/routing.py's request_partition

// requestPartition is the partition a request acts on, or -1 when it acts on many or its
// partition cannot be told without the store. An insert of a hash document without _id_ gets
// one made here (a UUIDv7, as a node makes it): out is the request to send then.
func requestPartition(place placement, q request, doc bson.D) (p int, out bson.D) {
	if place.Partitions <= 1 {
		return 0, doc
	}
	var entry operation
	if q.field {
		if _, ok := fieldVerbs[q.op]; !ok {
			return -1, doc
		}
	} else {
		var ok bool
		if entry, ok = operations[q.op]; !ok || entry.cursor {
			return -1, doc
		}
	}
	if q.argsAt >= 0 { // args encoded once, here: sent as these bytes, wherever the request goes
		if _, raw := doc[q.argsAt].Value.(bson.Raw); !raw {
			if rv, ok := value(doc[q.argsAt].Value); ok && rv.Type == bsontype.EmbeddedDocument {
				doc = append(bson.D(nil), doc...)
				doc[q.argsAt] = bson.E{Key: "args", Value: rv.Document()}
			}
		}
	}
	var value bson.RawValue
	ok := false
	switch {
	case place.Group != nil:
		value, ok = groupOf(entry, q, doc, *place.Group)
	case place.Type == "btree":
		value, ok = btreeKeyOf(entry, q, doc, place.Key)
	case place.Type == "blob":
		value, ok = blobKeyOf(entry, q, doc)
	case place.Type == "hash":
		value, ok, doc = keyOf(entry, q, doc)
	}
	if !ok {
		return -1, doc
	}
	p, ok = partitionOf(value, place.Partitions)
	if !ok {
		return -1, doc
	}
	return p, doc
}

// partitionOf is the partition (0 to partitions-1) of the document whose key is key: the
// BLAKE2b (8 bytes) of the key's encoding, big-endian, modulo partitions. ok is false for a
// value hoardDB's keys cannot hold.
func partitionOf(key bson.RawValue, partitions int) (int, bool) {
	if partitions <= 1 {
		return 0, true
	}
	enc, ok := encodeKey(nil, key)
	if !ok {
		return 0, false
	}
	h, _ := blake2b.New(8, nil)
	h.Write(enc)
	sum := binary.BigEndian.Uint64(h.Sum(nil))
	return int(sum % uint64(partitions)), true
}

// value is v as one BSON value (ok false when it is none).
func value(v interface{}) (bson.RawValue, bool) {
	if rv, ok := v.(bson.RawValue); ok {
		return rv, rv.Type != 0
	}
	if v == nil {
		return bson.RawValue{Type: bsontype.Null}, true
	}
	t, data, err := bson.MarshalValue(v)
	if err != nil {
		return bson.RawValue{}, false
	}
	return bson.RawValue{Type: t, Value: data}, true
}

// args is the request's args as a document (ok false when it has none, or they are no document).
func args(q request, doc bson.D) (bson.Raw, bool) {
	if q.argsAt < 0 {
		return nil, false
	}
	if raw, ok := doc[q.argsAt].Value.(bson.Raw); ok {
		return raw, true
	}
	rv, ok := value(doc[q.argsAt].Value)
	if !ok || rv.Type != bsontype.EmbeddedDocument {
		return nil, false
	}
	return rv.Document(), true
}

// isMapping is whether a value reads as a document on a node (a DBRef-shaped one reads as a DBRef, not a Mapping).
func isMapping(v bson.RawValue) bool {
	return v.Type == bsontype.EmbeddedDocument && !isDBRef(v.Document())
}

func isNull(v bson.RawValue) bool { return v.Type == bsontype.Null || v.Type == bsontype.Undefined }

// keyOf is a hash bucket's request's document key (hoarddb/routing.py key_of).
func keyOf(entry operation, q request, doc bson.D) (bson.RawValue, bool, bson.D) {
	if q.field { // a document's store field: routed by the document's key
		if !q.hasKey {
			return bson.RawValue{}, false, doc
		}
		v, ok := value(q.key)
		return v, ok, doc
	}
	if entry.keyParam == "" {
		return bson.RawValue{}, false, doc
	}
	a, ok := args(q, doc)
	if !ok {
		return bson.RawValue{}, false, doc
	}
	v, err := a.LookupErr(entry.keyParam)
	if err != nil || isNull(v) || v.Type == bsontype.Array {
		return bson.RawValue{}, false, doc
	}
	if isMapping(v) {
		if key, err := v.Document().LookupErr("_id_"); err == nil {
			return key, !isMapping(key) && key.Type != bsontype.Array, doc
		}
		if entry.makesKey && entry.keyKind == "doc" {
			key := newUUID7()
			return stringValue(key), true, withKey(q, doc, a, entry.keyParam, v.Document(), key)
		}
		return bson.RawValue{}, false, doc
	}
	return v, entry.keyKind == "any", doc
}

// withKey is doc with its args' document (args[param]) given _id_ first, as a node gives it.
func withKey(q request, doc bson.D, a bson.Raw, param string, d bson.Raw, key string) bson.D {
	made := bson.D{{Key: "_id_", Value: key}}
	elems, _ := d.Elements()
	for _, e := range elems {
		made = append(made, bson.E{Key: e.Key(), Value: e.Value()})
	}
	newArgs := bson.D{}
	elems, _ = a.Elements()
	for _, e := range elems {
		if e.Key() == param {
			newArgs = append(newArgs, bson.E{Key: param, Value: made})
		} else {
			newArgs = append(newArgs, bson.E{Key: e.Key(), Value: e.Value()})
		}
	}
	out := make(bson.D, len(doc))
	copy(out, doc)
	out[q.argsAt] = bson.E{Key: "args", Value: newArgs}
	return out
}

// btreeKeyOf is a btree request's sort value: bare, or {Field: value}; an insert's document's.
func btreeKeyOf(entry operation, q request, doc bson.D, field *string) (bson.RawValue, bool) {
	var key bson.RawValue
	if q.field {
		if !q.hasKey {
			return key, false
		}
		var ok bool
		if key, ok = value(q.key); !ok {
			return key, false
		}
	} else if entry.keyParam == "" {
		return key, false
	} else {
		a, ok := args(q, doc)
		if !ok {
			return key, false
		}
		var err error
		if key, err = a.LookupErr(entry.keyParam); err != nil {
			return key, false
		}
		if entry.keyKind == "doc" { // insert: the document's sort value
			if !isMapping(key) {
				return key, false
			}
			d := key.Document()
			if field != nil {
				v, err := d.LookupErr(*field)
				return v, err == nil
			}
			if v, err := d.LookupErr("_id_"); err == nil {
				return v, true
			}
			elems, err := d.Elements()
			if err != nil || len(elems) == 0 {
				return key, false
			}
			return elems[0].Value(), true
		}
	}
	if isMapping(key) {
		elems, err := key.Document().Elements()
		if err != nil || len(elems) != 1 {
			return key, false
		}
		key = elems[0].Value()
		if isMapping(key) {
			inner, _ := key.Document().Elements()
			for _, e := range inner {
				if strings.HasPrefix(e.Key(), "$") {
					return key, false
				}
			}
		}
	}
	return key, key.Type != bsontype.Array
}

// blobKeyOf is a blob request's id in lower case (get, info, delete); a put's id is made by the node.
// An id with letters beyond ASCII is not routed (its lower case is Python's to say).
func blobKeyOf(entry operation, q request, doc bson.D) (bson.RawValue, bool) {
	if q.field || entry.keyParam == "" || entry.upload != "" {
		return bson.RawValue{}, false
	}
	a, ok := args(q, doc)
	if !ok {
		return bson.RawValue{}, false
	}
	v, err := a.LookupErr(entry.keyParam)
	if err != nil {
		return v, false
	}
	if isMapping(v) {
		if v, err = v.Document().LookupErr("_id_"); err != nil {
			return v, false
		}
	}
	var id string
	if sub, data, ok := v.BinaryOK(); ok && sub == 4 && len(data) == 16 {
		h := hex.EncodeToString(data)
		id = h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
	} else if s, ok := v.StringValueOK(); ok {
		for i := 0; i < len(s); i++ {
			if s[i] >= 0x80 {
				return v, false
			}
		}
		id = strings.ToLower(s)
	} else {
		return v, false
	}
	return stringValue(id), true
}

// groupOf is a partitioned queue's push's group value (missing: null); no other verb has one.
func groupOf(entry operation, q request, doc bson.D, group string) (bson.RawValue, bool) {
	if q.field || !entry.pushes {
		return bson.RawValue{}, false
	}
	a, ok := args(q, doc)
	if !ok {
		return bson.RawValue{}, false
	}
	pushed, err := a.LookupErr("doc")
	if err != nil || !isMapping(pushed) {
		return bson.RawValue{}, false
	}
	v, err := pushed.Document().LookupErr(group)
	if err != nil {
		return bson.RawValue{Type: bsontype.Null}, true
	}
	return v, true
}

func stringValue(s string) bson.RawValue {
	t, data, _ := bson.MarshalValue(s)
	return bson.RawValue{Type: t, Value: data}
}

// ---------------------------------------------------------------------------------------------
// hoardDB's key encoding: hoarddb/values/keys.py encode_key, of a value as a node decodes it

const (
	tagEnd      = 0x00
	tagMinKey   = 0x0A
	tagNull     = 0x14
	tagNumber   = 0x1E
	tagString   = 0x28
	tagObject   = 0x32
	tagArray    = 0x3C
	tagBinary   = 0x46
	tagObjectID = 0x50
	tagBool     = 0x5A
	tagDate     = 0x64
	tagTime     = 0x6E
	tagRegex    = 0x78
	tagCode     = 0x82
	tagCodeWS   = 0x8C
	tagMaxKey   = 0xF0

	numBelow, numExact, numAbove = 0x01, 0x02, 0x03
)

// encodeKey appends the order-preserving key bytes of one BSON value to out; ok is false for a
// value a key cannot hold (it is then not routed: its node says what is wrong with it).
func encodeKey(out []byte, v bson.RawValue) ([]byte, bool) {
	switch v.Type {
	case bsontype.Double, bsontype.Int32, bsontype.Int64, bsontype.Decimal128:
		return encodeNumber(append(out, tagNumber), v)
	case bsontype.String, bsontype.Symbol: // (a node reads a symbol as a string)
		s, _ := v.StringValueOK()
		if v.Type == bsontype.Symbol {
			s, _ = v.SymbolOK()
		}
		return keyString(append(out, tagString), s), true
	case bsontype.EmbeddedDocument:
		d := v.Document()
		return objectBody(append(out, tagObject), dbRefOrder(d))
	case bsontype.Array:
		out = append(out, tagArray)
		values, err := v.Array().Values()
		if err != nil {
			return out, false
		}
		for _, e := range values {
			var ok bool
			if out, ok = encodeKey(out, e); !ok {
				return out, false
			}
		}
		return append(out, tagEnd), true
	case bsontype.Binary:
		sub, data, ok := v.BinaryOK()
		if !ok {
			return out, false
		}
		out = append(out, tagBinary)
		out = binary.BigEndian.AppendUint32(out, uint32(len(data)))
		return append(append(out, sub), data...), true
	case bsontype.ObjectID:
		oid, _ := v.ObjectIDOK()
		return append(append(out, tagObjectID), oid[:]...), true
	case bsontype.Boolean:
		b, _ := v.BooleanOK()
		if b {
			return append(out, tagBool, 1), true
		}
		return append(out, tagBool, 0), true
	case bsontype.DateTime:
		ms, _ := v.DateTimeOK()
		return binary.BigEndian.AppendUint64(append(out, tagDate), uint64(ms)+1<<63), true
	case bsontype.Timestamp:
		t, i, _ := v.TimestampOK()
		out = binary.BigEndian.AppendUint32(append(out, tagTime), t)
		return binary.BigEndian.AppendUint32(out, i), true
	case bsontype.Regex:
		pattern, options, _ := v.RegexOK()
		flags := []byte{}
		for _, letter := range []byte("ilmsux") { // as a node keeps them: known letters, in this order
			if strings.IndexByte(options, letter) >= 0 {
				flags = append(flags, letter)
			}
		}
		return keyString(keyString(append(out, tagRegex), pattern), string(flags)), true
	case bsontype.JavaScript:
		code, _ := v.JavaScriptOK()
		return keyString(append(out, tagCode), code), true
	case bsontype.CodeWithScope:
		code, scope, ok := v.CodeWithScopeOK()
		if !ok {
			return out, false
		}
		return objectBody(keyString(append(out, tagCodeWS), code), dbRefOrder(scope))
	case bsontype.DBPointer: // a node reads it as a DBRef: {$ref, $id}
		ns, oid, _ := v.DBPointerOK()
		out = keyString(append(out, tagObject, tagString), "$ref")
		out = keyString(out, ns)
		out = keyString(append(out, tagObjectID), "$id")
		return append(append(out, oid[:]...), tagEnd), true
	case bsontype.Null, bsontype.Undefined:
		return append(out, tagNull), true
	case bsontype.MinKey:
		return append(out, tagMinKey), true
	case bsontype.MaxKey:
		return append(out, tagMaxKey), true
	}
	return out, false
}

// keyString appends a string's body: UTF-8, 0x00 escaped as 0x00 0xFF, ended by 0x00 0x01.
func keyString(out []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		out = append(out, s[i])
		if s[i] == 0 {
			out = append(out, 0xFF)
		}
	}
	return append(out, 0x00, 0x01)
}

// objectBody appends each field (its value's tag, its name, the value's body), then the end.
func objectBody(out []byte, elems []bson.RawElement) ([]byte, bool) {
	for _, e := range elems {
		enc, ok := encodeKey(nil, e.Value())
		if !ok || len(enc) == 0 {
			return out, false
		}
		out = append(out, enc[0])
		out = keyString(out, e.Key())
		out = append(out, enc[1:]...)
	}
	return append(out, tagEnd), true
}

// isDBRef is whether a node reads the document as a DBRef: a string $ref, an $id, and a $db
// that is a string or null, if any (as pymongo decodes it).
func isDBRef(d bson.Raw) bool {
	ref, err := d.LookupErr("$ref")
	if err != nil || ref.Type != bsontype.String {
		return false
	}
	if _, err := d.LookupErr("$id"); err != nil {
		return false
	}
	db, err := d.LookupErr("$db")
	return err != nil || db.Type == bsontype.String || db.Type == bsontype.Null
}

// dbRefOrder is a document's fields in the order a node keys them: a DBRef's $ref, $id and $db
// (when not null) first, then the others.
func dbRefOrder(d bson.Raw) []bson.RawElement {
	elems, _ := d.Elements()
	if !isDBRef(d) {
		return elems
	}
	out := make([]bson.RawElement, 0, len(elems))
	for _, name := range []string{"$ref", "$id", "$db"} {
		for _, e := range elems {
			if e.Key() == name && !(name == "$db" && e.Value().Type == bsontype.Null) {
				out = append(out, e)
				break
			}
		}
	}
	for _, e := range elems {
		if k := e.Key(); k != "$ref" && k != "$id" && k != "$db" {
			out = append(out, e)
		}
	}
	return out
}

// encodeNumber appends a number's body: the sortable double nearest its value, then whether the
// value is below, at or above it, and, when not at it, its exact decimal digits.
func encodeNumber(out []byte, v bson.RawValue) ([]byte, bool) {
	var exact *big.Rat // nil: the value is exactly a double (or NaN, or infinite)
	var f float64
	switch v.Type {
	case bsontype.Double:
		f, _ = v.DoubleOK()
	case bsontype.Int32:
		i, _ := v.Int32OK()
		f = float64(i)
	case bsontype.Int64:
		i, _ := v.Int64OK()
		f = float64(i) // (rounded to nearest even, as Python's float(int))
		if f >= math.Ldexp(1, 63) || int64(f) != i {
			exact = new(big.Rat).SetInt64(i)
		}
	case bsontype.Decimal128:
		d, _ := v.Decimal128OK()
		switch {
		case d.IsNaN():
			f = math.NaN()
		case d.IsInf() != 0:
			f = math.Inf(d.IsInf())
		default:
			coef, exp, err := d.BigInt()
			if err != nil {
				return out, false
			}
			r := new(big.Rat).SetInt(coef)
			scale := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs(exp))), nil)
			if exp >= 0 {
				r.Mul(r, new(big.Rat).SetInt(scale))
			} else {
				r.Quo(r, new(big.Rat).SetInt(scale))
			}
			f, _ = r.Float64()
			if math.IsInf(f, 0) { // beyond the double range: clamped
				f = math.Copysign(math.MaxFloat64, f)
			}
			if new(big.Rat).SetFloat64(f).Cmp(r) != 0 {
				exact = r
			}
		}
	}
	out = append(out, sortableDouble(f)...)
	if exact == nil {
		return append(out, numExact), true
	}
	if exact.Cmp(new(big.Rat).SetFloat64(f)) < 0 {
		out = append(out, numBelow)
	} else {
		out = append(out, numAbove)
	}
	return appendExact(out, v), true
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

func sortableDouble(f float64) []byte {
	var b [8]byte
	if f != f {
		return b[:]
	}
	if f == 0 {
		f = 0 // -0.0 counts as 0.0
	}
	bits := math.Float64bits(f)
	if bits&(1<<63) != 0 {
		bits ^= math.MaxUint64
	} else {
		bits ^= 1 << 63
	}
	binary.BigEndian.PutUint64(b[:], bits)
	return b[:]
}

// appendExact appends X: the sign, then E + 2**31 and the significant digits in pairs, ended by
// 0x00, all inverted for a negative value (for |v| = 0.d1d2... * 10**(E+1)).
func appendExact(out []byte, v bson.RawValue) []byte {
	var digits string
	var adjusted int64
	negative := false
	if v.Type == bsontype.Int64 {
		i, _ := v.Int64OK()
		n := new(big.Int).SetInt64(i)
		negative = n.Sign() < 0
		digits = n.Abs(n).String()
		adjusted = int64(len(digits)) - 1
	} else {
		d, _ := v.Decimal128OK()
		coef, exp, _ := d.BigInt()
		negative = coef.Sign() < 0
		digits = strings.TrimLeft(new(big.Int).Abs(coef).String(), "0")
		adjusted = int64(exp) + int64(len(digits)) - 1
	}
	digits = strings.TrimRight(digits, "0")
	body := binary.BigEndian.AppendUint32(nil, uint32(adjusted+1<<31))
	if len(digits)%2 == 1 {
		digits += "0"
	}
	for i := 0; i < len(digits); i += 2 {
		body = append(body, 1+10*(digits[i]-'0')+(digits[i+1]-'0'))
	}
	body = append(body, 0)
	if negative {
		for i := range body {
			body[i] = 255 - body[i]
		}
		return append(append(out, 0x01), body...)
	}
	return append(append(out, 0x02), body...)
}

// ---------------------------------------------------------------------------------------------

var uuid7State struct {
	sync.Mutex
	ms      int64
	counter uint64
}

// newUUID7 is a UUIDv7 as lowercase text, as hoarddb/ids.py makes them: a 48-bit time in ms, a
// 42-bit counter (random at each new millisecond, then counting), 32 random bits; strictly
// increasing within this process.
func newUUID7() string {
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	s := &uuid7State
	s.Lock()
	now := time.Now().UnixMilli()
	if now > s.ms {
		s.ms = now
		s.counter = binary.BigEndian.Uint64(rnd[4:]) & (1<<41 - 1)
	} else {
		s.counter++
		if s.counter >= 1<<42 {
			s.ms++
			s.counter = binary.BigEndian.Uint64(rnd[4:]) & (1<<41 - 1)
		}
	}
	ms, counter := s.ms, s.counter
	s.Unlock()
	hi := uint64(ms)<<16 | 0x7<<12 | (counter>>30)&0xFFF
	lo := uint64(0b10)<<62 | (counter&(1<<30-1))<<32 | uint64(binary.BigEndian.Uint32(rnd[:4]))
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], lo)
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
