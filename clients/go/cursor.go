package hoarddb

// cursor.go: a find, search or aggregate read a batch at a time (the server's cursors), so
// a result of any size is never whole in memory, in the server or here.

import (
	"context"

	"go.mongodb.org/mongo-driver/bson"
)

// Cursor is a read's documents, a batch at a time: the first came with the answer, each
// later one is asked for (op "more") when the one before is used up. A cursor keeps the
// connection its read ran on until it is read to its end or closed (only that connection
// may read it): Close a cursor you do not read to its end. The server closes a cursor left
// unread for its cursor_timeout (10 minutes by default).
//
//	cur, err := bucket.FindCursor(ctx, bson.D{{"Category", "repairs"}})
//	defer cur.Close(ctx)
//	for cur.Next(ctx) {
//		var t Ticket
//		if err := cur.Decode(&t); err != nil { ... }
//	}
//	if err := cur.Err(); err != nil { ... }
type Cursor struct {
	client    *Client
	cn        *conn
	id        int64
	batch     []bson.RawValue
	at        int
	current   bson.Raw
	err       error
	batchSize int
	// IndexUsed names the index that served the read ("none — full scan"), as Found does.
	IndexUsed string
}

// FindCursor is Find read through a cursor (FindOptions.BatchSize: documents per batch;
// 0: 101 in the first, then about 1 MiB of them).
func (b *Bucket) FindCursor(ctx context.Context, filter interface{}, opts ...FindOptions) (*Cursor, error) {
	o := last(opts)
	return b.cursor(ctx, "find", o.args(bson.D{{Key: "filter", Value: filterOrAll(filter)}}), o.BatchSize)
}

// SearchCursor is Search read through a cursor.
func (b *Bucket) SearchCursor(ctx context.Context, filter interface{}, opts ...FindOptions) (*Cursor, error) {
	o := last(opts)
	return b.cursor(ctx, "search", o.args(bson.D{{Key: "filter", Value: filterOrAll(filter)}}), o.BatchSize)
}

// AggregateCursor is Aggregate read through a cursor.
func (b *Bucket) AggregateCursor(ctx context.Context, pipeline interface{}, opts ...AggregateOptions) (*Cursor, error) {
	o := last(opts)
	args := bson.D{{Key: "pipeline", Value: pipeline}}
	if o.Explain {
		args = append(args, bson.E{Key: "explain", Value: true})
	}
	return b.cursor(ctx, "aggregate", args, o.BatchSize)
}

// firstBatch is what a first batch holds when the caller says nothing (MongoDB's default).
const firstBatch = 101

func (b *Bucket) cursor(ctx context.Context, op string, args bson.D, batchSize int) (*Cursor, error) {
	first := batchSize
	if first <= 0 {
		first = firstBatch
	}
	args = append(args, bson.E{Key: "batch_size", Value: first})
	req := append(append(bson.D{{Key: "op", Value: op}}, b.head...), bson.E{Key: "args", Value: args})
	cn, err := b.client.exclusive(ctx)
	if err != nil {
		return nil, err
	}
	c := &Cursor{client: b.client, cn: cn, batchSize: batchSize}
	raw, err := roundTripOn(ctx, cn, op, req)
	if err != nil {
		b.client.giveBack(cn, false)
		return nil, err
	}
	c.IndexUsed, _ = raw.Lookup("index_used").StringValueOK()
	c.take(raw)
	return c, nil
}

// roundTripOn runs one request of a cursor on its connection (a cursor is read only on the
// connection that opened it: nothing is sent again elsewhere).
func roundTripOn(ctx context.Context, cn *conn, op string, req bson.D) (bson.Raw, error) {
	raw, _, err := cn.roundTrip(ctx, req)
	if err != nil {
		return nil, unanswered(asError(err), op, false)
	}
	if ok, _ := raw.Lookup("ok").AsInt64OK(); ok != 1 {
		return nil, errorFromAnswer(raw)
	}
	return raw, nil
}

// take keeps an answer's batch and cursor id; at the end it gives the connection back.
func (c *Cursor) take(raw bson.Raw) {
	c.batch, c.at = nil, 0
	if arr, ok := raw.Lookup("result").ArrayOK(); ok {
		c.batch, _ = arr.Values()
	}
	c.id, _ = raw.Lookup("cursor").AsInt64OK()
	if c.id == 0 && c.cn != nil {
		c.client.giveBack(c.cn, true)
		c.cn = nil
	}
}

// Next moves to the next document, asking the server for the next batch when the one at
// hand is used up; false at the end or on an error (Err says which).
func (c *Cursor) Next(ctx context.Context) bool {
	for c.at >= len(c.batch) {
		if c.id == 0 || c.err != nil {
			return false
		}
		req := bson.D{{Key: "op", Value: "more"}, {Key: "cursor", Value: c.id}}
		if c.batchSize > 0 {
			req = append(req, bson.E{Key: "batch_size", Value: c.batchSize})
		}
		raw, err := roundTripOn(ctx, c.cn, "more", req)
		if err != nil {
			c.err = err
			c.id = 0
			c.client.giveBack(c.cn, false)
			c.cn = nil
			return false
		}
		c.take(raw)
	}
	c.current, _ = c.batch[c.at].DocumentOK()
	c.at++
	return true
}

// Current is the document Next moved to, as raw BSON.
func (c *Cursor) Current() bson.Raw { return c.current }

// Decode decodes the document Next moved to into v (a pointer: to a struct, bson.M, bson.D...).
func (c *Cursor) Decode(v interface{}) error { return bson.Unmarshal(c.current, v) }

// Err is the error that ended the cursor, if one did.
func (c *Cursor) Err() error { return c.err }

// All decodes every document left into v, a pointer to a slice, and closes the cursor.
func (c *Cursor) All(ctx context.Context, v interface{}) error {
	var docs bson.A
	for c.Next(ctx) {
		docs = append(docs, c.current)
	}
	if c.err != nil {
		return c.err
	}
	data, err := bson.Marshal(bson.D{{Key: "v", Value: docs}})
	if err != nil {
		return err
	}
	return decodeValue(bson.Raw(data).Lookup("v"), v)
}

// Close ends the cursor before its end (op "close_cursor"), freeing it on the server, and
// gives its connection back; nothing to do once it was read to its end.
func (c *Cursor) Close(ctx context.Context) error {
	if c.cn == nil {
		return nil
	}
	id, cn := c.id, c.cn
	c.id, c.cn, c.batch, c.at = 0, nil, nil, 0
	_, err := roundTripOn(ctx, cn, "close_cursor", bson.D{{Key: "op", Value: "close_cursor"}, {Key: "cursor", Value: id}})
	c.client.giveBack(cn, err == nil)
	return err
}
