package hoarddb

// api.go owns Database, Bucket, Document and Field: objects that only build operation
// documents of the command table and hand them to the Client, as hoarddb/api.py does.

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/bson"
)

// operation is one entry of the command table (table.go): what the client must know of it.
type operation struct {
	scope   string
	write   bool
	retry   bool
	streams bool
	upload  string
	types   []string
	// what routing by owner reads (router.go; hoarddb/routing.py): the parameter naming the one
	// document it acts on and that parameter's kind ("any", "doc", "filter"), whether an insert
	// without a key gets one made, whether its answer may come through a cursor, and whether it
	// adds the one document it is given (a queue's push); and whether a partitioned fifo's or
	// lifo's owners take it in turns (pop, claim, peek: router.go's turns)
	keyParam string
	keyKind  string
	makesKey bool
	cursor   bool
	pushes   bool
	turns    bool
}

// Database is a named group of buckets.
type Database struct {
	client *Client
	Name   string
}

// Database is the database called name (nothing is sent: CreateBucket creates it when needed).
func (c *Client) Database(name string) *Database { return &Database{client: c, Name: name} }

// Bucket is one bucket of the database (nothing is sent).
func (d *Database) Bucket(name string) *Bucket {
	return &Bucket{endpoint: endpoint{client: d.client, head: bson.D{{Key: "db", Value: d.Name}, {Key: "bucket", Value: name}}},
		Database: d, Name: name}
}

// CreateBucket declares a bucket; options is a document holding its type and options,
// such as bson.D{{"type", "hash"}, {"indices", bson.A{"Email"}}}. Warnings (an option
// recorded but not enforced) are on the returned bucket.
func (d *Database) CreateBucket(ctx context.Context, name string, options interface{}) (*Bucket, error) {
	a, err := d.client.do(ctx, "create_bucket", bson.D{{Key: "op", Value: "create_bucket"}, {Key: "db", Value: d.Name},
		{Key: "bucket", Value: name}, {Key: "options", Value: options}})
	if err != nil {
		return nil, err
	}
	b := d.Bucket(name)
	b.Warnings = a.Warnings()
	return b, nil
}

// AlterBucket changes a bucket's field lines or placement.
func (d *Database) AlterBucket(ctx context.Context, name string, options interface{}) (bson.M, error) {
	return d.client.resultM(ctx, "alter_bucket", bson.D{{Key: "db", Value: d.Name}, {Key: "bucket", Value: name},
		{Key: "options", Value: options}})
}

// DropBucket drops a bucket and every file of it.
func (d *Database) DropBucket(ctx context.Context, name string) (bson.M, error) {
	return d.client.resultM(ctx, "drop_bucket", bson.D{{Key: "db", Value: d.Name}, {Key: "bucket", Value: name}})
}

// Buckets are the names of the database's buckets, sorted.
func (d *Database) Buckets(ctx context.Context) ([]string, error) {
	var out []string
	return out, d.client.decode(ctx, "list_buckets", bson.D{{Key: "db", Value: d.Name}}, &out)
}

// Databases are the names of the databases the user may see, sorted.
func (c *Client) Databases(ctx context.Context) ([]string, error) {
	var out []string
	return out, c.decode(ctx, "list_databases", nil, &out)
}

// CreateDatabase creates a database (CreateBucket also creates its database when needed).
func (c *Client) CreateDatabase(ctx context.Context, name string) (*Database, error) {
	_, err := c.call(ctx, "create_database", bson.D{{Key: "db", Value: name}})
	return c.Database(name), err
}

// DropDatabase drops a database with all its buckets and their files.
func (c *Client) DropDatabase(ctx context.Context, name string) (bson.M, error) {
	return c.resultM(ctx, "drop_database", bson.D{{Key: "db", Value: name}})
}

// Metrics is every metric sample of the server (admin).
func (c *Client) Metrics(ctx context.Context) (bson.M, error) { return c.resultM(ctx, "metrics", nil) }

// SweepTTL runs one TTL sweep now (admin).
func (c *Client) SweepTTL(ctx context.Context) (bson.M, error) {
	return c.resultM(ctx, "sweep_ttl", nil)
}

// Whoami is the logged-in user and their roles.
func (c *Client) Whoami(ctx context.Context) (bson.M, error) { return c.resultM(ctx, "whoami", nil) }

// call runs operation op with the request's other fields.
func (c *Client) call(ctx context.Context, op string, fields bson.D) (Answer, error) {
	return c.do(ctx, op, append(bson.D{{Key: "op", Value: op}}, fields...))
}

func (c *Client) decode(ctx context.Context, op string, fields bson.D, v interface{}) error {
	a, err := c.call(ctx, op, fields)
	if err != nil {
		return err
	}
	return a.Decode(v)
}

func (c *Client) resultM(ctx context.Context, op string, fields bson.D) (bson.M, error) {
	var out bson.M
	return out, c.decode(ctx, op, fields, &out)
}

// decodeValue decodes a result into v; a null leaves v alone.
func decodeValue(rv bson.RawValue, v interface{}) error {
	if v == nil || rv.Type == 0 || rv.Type == bson.TypeNull {
		return nil
	}
	if p, ok := v.(*bson.RawValue); ok {
		*p = rv
		return nil
	}
	return rv.Unmarshal(v)
}

// endpoint is what a bucket and a store field share: where their operations go.
type endpoint struct {
	client *Client
	head   bson.D // db and bucket; a field adds key and field
}

func (e endpoint) call(ctx context.Context, op string, args bson.D) (Answer, error) {
	req := make(bson.D, 0, len(e.head)+2)
	req = append(req, bson.E{Key: "op", Value: op})
	req = append(req, e.head...)
	if args != nil {
		req = append(req, bson.E{Key: "args", Value: args})
	}
	return e.client.do(ctx, op, req)
}

func (e endpoint) decode(ctx context.Context, op string, args bson.D, v interface{}) error {
	a, err := e.call(ctx, op, args)
	if err != nil {
		return err
	}
	return a.Decode(v)
}

// one decodes a result that is a document or null into v; whether it was a document.
func (e endpoint) one(ctx context.Context, op string, args bson.D, v interface{}) (bool, error) {
	a, err := e.call(ctx, op, args)
	if err != nil {
		return false, err
	}
	r := a.Result()
	if r.Type == bson.TypeNull || r.Type == 0 {
		return false, nil
	}
	return true, decodeValue(r, v)
}

func (e endpoint) count(ctx context.Context, op string, args bson.D, field string) (int64, error) {
	a, err := e.call(ctx, op, args)
	if err != nil {
		return 0, err
	}
	r := a.Result()
	if field != "" {
		r = r.Document().Lookup(field)
	}
	n, _ := r.AsInt64OK()
	return n, nil
}

// ListOptions continue a list after a position and bound it: queues take After as how many
// to skip, keyed stores as a key. Zero values are left out.
type ListOptions struct {
	After interface{}
	Limit int
}

func (o ListOptions) args() bson.D {
	var d bson.D
	if o.After != nil {
		d = append(d, bson.E{Key: "after", Value: o.After})
	}
	if o.Limit > 0 {
		d = append(d, bson.E{Key: "limit", Value: o.Limit})
	}
	return d
}

func orEmpty(d bson.D) bson.D {
	if d == nil {
		return bson.D{}
	}
	return d
}

// Push adds one element (a heap element carries a numeric priority).
func (e endpoint) Push(ctx context.Context, doc interface{}) error {
	_, err := e.call(ctx, "push", bson.D{{Key: "doc", Value: doc}})
	return err
}

// BatchPush adds many elements (a slice) in one durable write, all or none; how many.
func (e endpoint) BatchPush(ctx context.Context, docs interface{}) (int64, error) {
	return e.count(ctx, "batch_push", bson.D{{Key: "docs", Value: docs}}, "")
}

// Pop removes the next element and decodes it into v; false when there was none.
// Pop removes what it returns: a screen that refreshes reads with Peek or List.
func (e endpoint) Pop(ctx context.Context, v interface{}) (bool, error) {
	return e.one(ctx, "pop", bson.D{}, v)
}

// PopN removes up to n elements (at most 100) in one write, decoded into v (a pointer to a slice).
func (e endpoint) PopN(ctx context.Context, n int, v interface{}) error {
	return e.decode(ctx, "pop", bson.D{{Key: "limit", Value: n}}, v)
}

// Peek decodes the next element in pop order into v, without removing it; false when there is none.
func (e endpoint) Peek(ctx context.Context, v interface{}) (bool, error) {
	return e.one(ctx, "peek", bson.D{}, v)
}

// PeekN decodes the next n elements in pop order (n at most 1000) into v, a pointer to a slice.
func (e endpoint) PeekN(ctx context.Context, n int, v interface{}) error {
	return e.decode(ctx, "peek", bson.D{{Key: "limit", Value: n}}, v)
}

// Length is how many elements the store holds (fifo, heap: how many are ready, not claimed).
func (e endpoint) Length(ctx context.Context) (int64, error) {
	return e.count(ctx, "length", bson.D{}, "")
}

// List reads in storage order without removing, into v (a pointer to a slice): queues
// oldest first; keyed stores in key order (a store field's elements as {key, doc}).
func (e endpoint) List(ctx context.Context, opts ListOptions, v interface{}) error {
	return e.decode(ctx, "list", orEmpty(opts.args()), v)
}

// Get decodes the document (or blob: see Blob) with this key into v; false when there is none.
func (e endpoint) Get(ctx context.Context, key interface{}, v interface{}) (bool, error) {
	return e.one(ctx, "get", bson.D{{Key: "key", Value: key}}, v)
}

// Info is a blob's metadata, without its bytes.
func (e endpoint) Info(ctx context.Context, id string) (BlobInfo, error) {
	var out BlobInfo
	return out, e.decode(ctx, "info", bson.D{{Key: "key", Value: id}}, &out)
}

// Load restores entries as a dump holds them (for restore tools); the server's account.
func (e endpoint) Load(ctx context.Context, docs interface{}) (bson.M, error) {
	var out bson.M
	return out, e.decode(ctx, "load", bson.D{{Key: "docs", Value: docs}}, &out)
}

// Bucket is one bucket of a database; its methods are the verbs of the command table.
// A verb its store type does not have is refused by the server (ErrVerbNotSupported).
type Bucket struct {
	endpoint
	Database *Database
	Name     string
	// Warnings are what CreateBucket's answer noted (an option recorded but not enforced).
	Warnings []string
}

// Doc is the document with this key, as the owner of its store fields:
// bucket.Doc("p1").Field("Expenses").Push(ctx, doc).
func (b *Bucket) Doc(key interface{}) *Document { return &Document{Bucket: b, Key: key} }

// Stats are the bucket's entries, bytes and index states.
func (b *Bucket) Stats(ctx context.Context) (bson.M, error) {
	return b.client.resultM(ctx, "stats", b.head)
}

// Describe is the bucket's declaration, verbs, indexes and size.
func (b *Bucket) Describe(ctx context.Context) (bson.M, error) {
	return b.client.resultM(ctx, "describe_bucket", b.head)
}

// Insert adds a document; a hash key (_id_) in use is refused with ErrDuplicateKey. Its key.
func (b *Bucket) Insert(ctx context.Context, doc interface{}) (interface{}, error) {
	var key interface{}
	return key, b.decode(ctx, "insert", bson.D{{Key: "doc", Value: doc}}, &key)
}

// BatchInsert inserts many documents (a slice) in one durable write, all or none; their keys.
func (b *Bucket) BatchInsert(ctx context.Context, docs interface{}) ([]interface{}, error) {
	var keys []interface{}
	return keys, b.decode(ctx, "batch_insert", bson.D{{Key: "docs", Value: docs}}, &keys)
}

// Put stores a whole document under its _id_, replacing one that exists (hash); its key.
// A blob bucket's bytes go with PutBlob.
func (b *Bucket) Put(ctx context.Context, doc interface{}) (interface{}, error) {
	var key interface{}
	return key, b.decode(ctx, "put", bson.D{{Key: "doc", Value: doc}}, &key)
}

// BatchPut puts many documents in one durable write, all or none; their keys.
func (b *Bucket) BatchPut(ctx context.Context, docs interface{}) ([]interface{}, error) {
	var keys []interface{}
	return keys, b.decode(ctx, "batch_put", bson.D{{Key: "docs", Value: docs}}, &keys)
}

// Exists is whether a document (hash) or an entry (btree) with this key exists, without reading it.
func (b *Bucket) Exists(ctx context.Context, key interface{}) (bool, error) {
	a, err := b.call(ctx, "exists", bson.D{{Key: "key", Value: key}})
	if err != nil {
		return false, err
	}
	yes, _ := a.Result().BooleanOK()
	return yes, nil
}

// FindOptions shape what a find or search answers; zero values are left out. Sort orders
// the matches by fields and directions: give a bson.D, whose keys keep their order
// (bson.D{{Key: "Date", Value: -1}}), not a bson.M, whose keys come in any order. Skip
// passes over that many matches, Limit answers at most that many (a sort with a limit
// holds only Skip+Limit documents at a time), and Projection keeps (bson.M{"Title": 1})
// or drops (bson.M{"Notes": 0}) fields, _id_ kept unless dropped. Explain (search only)
// asks the planner for its account.
type FindOptions struct {
	Sort       interface{}
	Skip       int
	Limit      int
	Projection interface{}
	Explain    bool
	// BatchSize is FindCursor's and SearchCursor's documents per batch (0: 101 first, then
	// about 1 MiB of them); Find and Search read their whole answer at once.
	BatchSize int
}

func (o FindOptions) args(args bson.D) bson.D {
	if o.Sort != nil {
		args = append(args, bson.E{Key: "sort", Value: o.Sort})
	}
	if o.Skip != 0 { // a negative one is sent, for the server to refuse
		args = append(args, bson.E{Key: "skip", Value: o.Skip})
	}
	if o.Limit != 0 {
		args = append(args, bson.E{Key: "limit", Value: o.Limit})
	}
	if o.Projection != nil {
		args = append(args, bson.E{Key: "projection", Value: o.Projection})
	}
	if o.Explain {
		args = append(args, bson.E{Key: "explain", Value: true})
	}
	return args
}

// last is the options a method was given (variadic, so that they may be left out): the
// last one, or the zero value when there is none.
func last[T any](opts []T) T {
	var o T
	if len(opts) > 0 {
		o = opts[len(opts)-1]
	}
	return o
}

// Found says how find, search or aggregate found its documents.
type Found struct {
	// IndexUsed is the index's name, or "none — full scan".
	IndexUsed string
	// Explain is the planner's account, when asked for.
	Explain bson.Raw
}

// found runs a read that answers documents and says how it found them, decoding them into v.
func (b *Bucket) found(ctx context.Context, op string, args bson.D, v interface{}) (Found, error) {
	a, err := b.call(ctx, op, args)
	if err != nil {
		return Found{}, err
	}
	f := Found{IndexUsed: a.IndexUsed()}
	f.Explain, _ = a.Raw.Lookup("explain").DocumentOK()
	return f, a.Decode(v)
}

func filterOrAll(filter interface{}) interface{} {
	if filter == nil {
		return bson.D{}
	}
	return filter
}

// Find decodes the documents matching the filter (nil: all; a full scan) into v, a
// pointer to a slice: in key order, or sorted, skipped, limited and projected as opts say.
func (b *Bucket) Find(ctx context.Context, filter interface{}, v interface{}, opts ...FindOptions) (Found, error) {
	return b.found(ctx, "find", last(opts).args(bson.D{{Key: "filter", Value: filterOrAll(filter)}}), v)
}

// Search is Find served by an index when one fits; Found.IndexUsed names it.
func (b *Bucket) Search(ctx context.Context, filter interface{}, v interface{}, opts ...FindOptions) (Found, error) {
	return b.found(ctx, "search", last(opts).args(bson.D{{Key: "filter", Value: filterOrAll(filter)}}), v)
}

// Distinct decodes the different values of field (a dotted path) in the documents matching
// the filter (nil: all) into v, a pointer to a slice ([]string, []interface{}...), in
// sort order; an array field gives its elements one by one.
func (b *Bucket) Distinct(ctx context.Context, field string, filter interface{}, v interface{}) error {
	return b.decode(ctx, "distinct", bson.D{{Key: "field", Value: field}, {Key: "filter", Value: filterOrAll(filter)}}, v)
}

// WindowOptions select one window of a time-range index (exactly one of Newest, Oldest
// and ByStart) and what to read of it: Top ranks that many values of the field after the
// timestamp by their counts, Counts gives every value's count.
type WindowOptions struct {
	Newest  bool
	Oldest  bool
	ByStart time.Time
	Top     int
	Counts  bool
}

// Window decodes one window of a time-range index into v, read from the counts the index
// keeps: {index, start, end, count}, with field and top or counts when asked.
func (b *Bucket) Window(ctx context.Context, index string, opts WindowOptions, v interface{}) error {
	args := bson.D{{Key: "index", Value: index}}
	if opts.Newest {
		args = append(args, bson.E{Key: "newest", Value: true})
	}
	if opts.Oldest {
		args = append(args, bson.E{Key: "oldest", Value: true})
	}
	if !opts.ByStart.IsZero() {
		args = append(args, bson.E{Key: "byStart", Value: opts.ByStart})
	}
	if opts.Top > 0 {
		args = append(args, bson.E{Key: "top", Value: opts.Top})
	}
	if opts.Counts {
		args = append(args, bson.E{Key: "counts", Value: true})
	}
	return b.decode(ctx, "window", args, v)
}

// AggregateOptions: Explain asks how a leading $match was served (Found.Explain).
type AggregateOptions struct {
	Explain bool
	// BatchSize is AggregateCursor's documents per batch (0: 101 first, then about 1 MiB of them).
	BatchSize int
}

// Aggregate runs an aggregation pipeline (a bson.A or a []bson.D of stages: $match,
// $group, $sort, $project, $unwind, $lookup...) over the bucket and decodes what it makes
// into v, a pointer to a slice; Found.IndexUsed names the index that served a leading $match.
func (b *Bucket) Aggregate(ctx context.Context, pipeline interface{}, v interface{}, opts ...AggregateOptions) (Found, error) {
	args := bson.D{{Key: "pipeline", Value: pipeline}}
	if last(opts).Explain {
		args = append(args, bson.E{Key: "explain", Value: true})
	}
	return b.found(ctx, "aggregate", args, v)
}

// Count is how many documents match the filter (nil: all).
func (b *Bucket) Count(ctx context.Context, filter interface{}) (int64, error) {
	return b.count(ctx, "count", bson.D{{Key: "filter", Value: filterOrAll(filter)}}, "")
}

// UpdateOptions: Upsert inserts a document when nothing matches (the filter's equality
// fields, then the update, $setOnInsert included); OnlyFirst changes only the first match
// in key order (MongoDB's updateOne; the server's multi: false), where by default every
// match changes; ArrayFilters are the filters of the update's $[<identifier>] paths, one
// filter document per identifier.
type UpdateOptions struct {
	Upsert       bool
	OnlyFirst    bool
	ArrayFilters []interface{}
}

// UpdateResult is how many documents an update matched and changed, and the key of the
// document an upsert inserted (nil when it inserted none).
type UpdateResult struct {
	Matched  int64       `bson:"matched"`
	Modified int64       `bson:"modified"`
	Upserted interface{} `bson:"upserted"`
}

// Update applies update operators to every matching document (with OnlyFirst, the first),
// in one write: all of them change, or none.
func (b *Bucket) Update(ctx context.Context, filter, update interface{}, opts ...UpdateOptions) (UpdateResult, error) {
	args := bson.D{{Key: "filter", Value: filter}, {Key: "update", Value: update}}
	o := last(opts)
	if o.Upsert {
		args = append(args, bson.E{Key: "upsert", Value: true})
	}
	if o.OnlyFirst {
		args = append(args, bson.E{Key: "multi", Value: false})
	}
	if o.ArrayFilters != nil {
		args = append(args, bson.E{Key: "arrayFilters", Value: o.ArrayFilters})
	}
	var out UpdateResult
	return out, b.decode(ctx, "update", args, &out)
}

// FindAndModifyOptions: New returns the document as it became (by default, as it was);
// Upsert inserts when nothing matches; Remove deletes the document instead of updating it
// (give a nil update); Sort picks which match, when several do (a bson.D); Projection
// shapes the document returned; ArrayFilters are the filters of the update's
// $[<identifier>] paths.
type FindAndModifyOptions struct {
	New          bool
	Upsert       bool
	Remove       bool
	Sort         interface{}
	Projection   interface{}
	ArrayFilters []interface{}
}

// FindAndModify updates (or, with Remove, deletes) one document matching the filter and
// decodes it into v, in one atomic read-modify-write: no other write comes between. False
// when no document came back: nothing matched, or an upsert inserted without New.
// Counters and job queues are built on it.
func (b *Bucket) FindAndModify(ctx context.Context, filter, update interface{}, v interface{}, opts ...FindAndModifyOptions) (bool, error) {
	args := bson.D{{Key: "filter", Value: filterOrAll(filter)}}
	if update != nil {
		args = append(args, bson.E{Key: "update", Value: update})
	}
	o := last(opts)
	for _, flag := range []struct {
		name string
		on   bool
	}{{"new", o.New}, {"upsert", o.Upsert}, {"remove", o.Remove}} {
		if flag.on {
			args = append(args, bson.E{Key: flag.name, Value: true})
		}
	}
	if o.Sort != nil {
		args = append(args, bson.E{Key: "sort", Value: o.Sort})
	}
	if o.Projection != nil {
		args = append(args, bson.E{Key: "projection", Value: o.Projection})
	}
	if o.ArrayFilters != nil {
		args = append(args, bson.E{Key: "arrayFilters", Value: o.ArrayFilters})
	}
	return b.one(ctx, "find_and_modify", args, v)
}

// Delete deletes: a hash bucket's documents matching a filter, a btree's entries with a
// key, a blob bucket's blob with an id. How many went.
func (b *Bucket) Delete(ctx context.Context, target interface{}) (int64, error) {
	return b.count(ctx, "delete", bson.D{{Key: "target", Value: target}}, "deleted")
}

// RangeOptions bound a range and choose its direction.
type RangeOptions struct {
	Limit   int
	Reverse bool
}

// Range decodes the entries whose key lies within bounds ({$gte: a, $lte: b}), in key
// order, into v, a pointer to a slice.
func (b *Bucket) Range(ctx context.Context, bounds interface{}, v interface{}, opts ...RangeOptions) error {
	if bounds == nil {
		bounds = bson.D{}
	}
	args := bson.D{{Key: "bounds", Value: bounds}}
	o := last(opts)
	if o.Limit > 0 {
		args = append(args, bson.E{Key: "limit", Value: o.Limit})
	}
	if o.Reverse {
		args = append(args, bson.E{Key: "reverse", Value: true})
	}
	return b.decode(ctx, "range", args, v)
}

// First decodes the entry with the lowest key into v; false when the bucket is empty.
func (b *Bucket) First(ctx context.Context, v interface{}) (bool, error) {
	return b.one(ctx, "first", bson.D{}, v)
}

// Last decodes the entry with the highest key into v; false when the bucket is empty.
func (b *Bucket) Last(ctx context.Context, v interface{}) (bool, error) {
	return b.one(ctx, "last", bson.D{}, v)
}

// ExportPage is one page of every entry in storage order; pass Next back as the cursor,
// until it is nil.
type ExportPage struct {
	Docs []bson.Raw  `bson:"docs"`
	Next interface{} `bson:"next"`
}

// Export reads one page of every entry in storage order, for dumps.
func (b *Bucket) Export(ctx context.Context, cursor interface{}, limit int) (ExportPage, error) {
	args := bson.D{}
	if cursor != nil {
		args = append(args, bson.E{Key: "cursor", Value: cursor})
	}
	if limit > 0 {
		args = append(args, bson.E{Key: "limit", Value: limit})
	}
	var out ExportPage
	return out, b.decode(ctx, "export", args, &out)
}

// ClaimOptions: how many elements (1 to 100) and for how long they stay hidden (30 s by default).
type ClaimOptions struct {
	Limit int
	Lease time.Duration
}

// Claim is one element handed out by claim, hidden from others until Ack, Release or its lease runs out.
type Claim struct {
	ClaimID    string   `bson:"claimId"`
	Deliveries int64    `bson:"deliveries"`
	Element    bson.Raw `bson:"element"`
}

// Decode decodes the claimed element into v.
func (c Claim) Decode(v interface{}) error { return bson.Unmarshal(c.Element, v) }

// Claim hands out up to opts.Limit elements of a fifo or heap bucket for opts.Lease: the
// worker queue that survives a crashed worker (Ack when done, Release to give back).
func (b *Bucket) Claim(ctx context.Context, opts ClaimOptions) ([]Claim, error) {
	args := bson.D{}
	if opts.Limit > 0 {
		args = append(args, bson.E{Key: "limit", Value: opts.Limit})
	}
	if opts.Lease > 0 {
		args = append(args, bson.E{Key: "lease", Value: opts.Lease.Seconds()})
	}
	var out []Claim
	return out, b.decode(ctx, "claim", args, &out)
}

// oneOrList is one claimId as itself, several as a list (ack and release take either).
func oneOrList(ids []string) interface{} {
	if len(ids) == 1 {
		return ids[0]
	}
	return ids
}

// Ack removes claimed elements for good, all in one write (at most 1000); how many.
func (b *Bucket) Ack(ctx context.Context, claimIDs ...string) (int64, error) {
	return b.count(ctx, "ack", bson.D{{Key: "claimId", Value: oneOrList(claimIDs)}}, "acked")
}

// Release gives claimed elements back now: claimable again first, in their order; how many.
func (b *Bucket) Release(ctx context.Context, claimIDs ...string) (int64, error) {
	return b.count(ctx, "release", bson.D{{Key: "claimId", Value: oneOrList(claimIDs)}}, "released")
}

// Extend renews a claim's lease to lease from now (a heartbeat for long jobs); the server's answer.
func (b *Bucket) Extend(ctx context.Context, claimID string, lease time.Duration) (bson.M, error) {
	var out bson.M
	return out, b.decode(ctx, "extend", bson.D{{Key: "claimId", Value: claimID}, {Key: "seconds", Value: lease.Seconds()}}, &out)
}

// Document is a document's address in a bucket, as the owner of its store fields.
type Document struct {
	Bucket *Bucket
	Key    interface{}
}

// Field is the store field called name of this document: db.Property["p1"].Expenses.
func (d *Document) Field(name string) *Field {
	head := make(bson.D, 0, 4)
	head = append(head, d.Bucket.head...)
	head = append(head, bson.E{Key: "key", Value: d.Key}, bson.E{Key: "field", Value: name})
	return &Field{endpoint: endpoint{client: d.Bucket.client, head: head}, Document: d, Name: name}
}

// Element is an element of a hash or btree store field, as the owner of the store fields
// its declaration gives its elements (a level deeper): db.User["jane"].Friends["bob"].Messages
// is bucket.Doc("jane").Field("Friends").Element("bob").Field("Messages").
type Element struct {
	Owner *Field // the store field the element is in
	Key   interface{}
}

// Element is the element with this key of a hash or btree store field, as the owner of its stores.
func (f *Field) Element(key interface{}) *Element {
	return &Element{Owner: f, Key: key}
}

// Field is the store field called name of this element. Its requests keep the document's key
// and field, and name the steps below them in path: [{key, field}, ...].
func (e *Element) Field(name string) *Field {
	parent := e.Owner
	head := make(bson.D, 0, len(parent.head)+1)
	path := bson.A{}
	for _, kv := range parent.head {
		if kv.Key == "path" {
			path = append(path, kv.Value.(bson.A)...)
			continue
		}
		head = append(head, kv)
	}
	path = append(path, bson.D{{Key: "key", Value: e.Key}, {Key: "field", Value: name}})
	head = append(head, bson.E{Key: "path", Value: path})
	return &Field{endpoint: endpoint{client: parent.client, head: head}, Document: parent.Document, Name: name}
}

// Field is one store a document owns; its methods are the store-field verbs of its type:
// Push/Pop/Peek/List/Length on fifo, lifo and heap fields; Put(key, doc)/Get/Delete/List on
// hash and btree fields; PutBlob/Get/Info/Delete/Stream on blob fields.
type Field struct {
	endpoint
	Document *Document
	Name     string
}

// Put stores doc under key in a hash or btree store field, replacing; the key.
func (f *Field) Put(ctx context.Context, key interface{}, doc interface{}) (interface{}, error) {
	var out interface{}
	return out, f.decode(ctx, "put", bson.D{{Key: "key", Value: key}, {Key: "doc", Value: doc}}, &out)
}

// Delete deletes the element with this key (a blob field: the blob with this id); how many went.
func (f *Field) Delete(ctx context.Context, key interface{}) (int64, error) {
	return f.count(ctx, "delete", bson.D{{Key: "key", Value: key}}, "deleted")
}
