package hoarddb

// blob.go owns blob bytes over the wire: uploads in chunks from an io.Reader, and streams
// read into an io.Writer or through an io.ReadCloser, never whole in memory.

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"go.mongodb.org/mongo-driver/bson"
)

// BlobInfo is a blob's metadata.
type BlobInfo struct {
	ID      string      `bson:"_id_"`
	Name    string      `bson:"name"`
	Type    string      `bson:"type"`
	Size    int64       `bson:"size"`
	SHA256  string      `bson:"sha256"`
	Created interface{} `bson:"created,omitempty"`
}

// Blob is a blob with its bytes, as Get decodes it.
type Blob struct {
	BlobInfo `bson:",inline"`
	Data     []byte `bson:"data"`
}

func blobOptions(name, typ string) bson.D {
	var d bson.D
	if name != "" {
		d = append(d, bson.E{Key: "name", Value: name})
	}
	if typ != "" {
		d = append(d, bson.E{Key: "type", Value: typ})
	}
	return d
}

// PutBlob stores the bytes r gives as a blob of this blob bucket, with an optional name and
// media type; the blob's id. Up to 4 MiB already in memory (a *bytes.Reader, *bytes.Buffer,
// *strings.Reader) goes inline; anything else is uploaded in 1 MiB chunks read as they are sent.
// A failed read of r aborts the upload: nothing is stored.
func (b *Bucket) PutBlob(ctx context.Context, r io.Reader, name, typ string) (string, error) {
	if l, ok := r.(interface{ Len() int }); ok && l.Len() <= inlineBlobMax {
		data, err := io.ReadAll(r)
		if err != nil {
			return "", err
		}
		var id string
		args := append(bson.D{{Key: "doc", Value: data}}, blobOptions(name, typ)...)
		return id, b.decode(ctx, "put", args, &id)
	}
	return b.upload(ctx, r, blobOptions(name, typ))
}

func (b *Bucket) upload(ctx context.Context, r io.Reader, args bson.D) (string, error) {
	cn, err := b.client.exclusive(ctx)
	if err != nil {
		return "", err
	}
	clean := false
	defer func() { b.client.giveBack(cn, clean) }()
	id, ch := cn.register(1)
	defer cn.unregister(id)
	req := append(bson.D{{Key: "op", Value: "put"}}, b.head...)
	req = append(req, bson.E{Key: "upload", Value: true}, bson.E{Key: "args", Value: orEmpty(args)})
	if _, err := cn.send(id, req); err != nil {
		return "", unanswered(asError(err), "put", true)
	}
	chunk := func(data []byte, end, abort bool) error {
		if data == nil {
			data = []byte{} // binary, never null
		}
		msg := bson.D{{Key: "op", Value: "chunk"}, {Key: "data", Value: data}}
		if end {
			msg = append(msg, bson.E{Key: "end", Value: true})
		}
		if abort {
			msg = append(msg, bson.E{Key: "abort", Value: true})
		}
		_, err := cn.send(id, msg)
		return err
	}
	buf := make([]byte, chunkSize)
	for {
		if ctx.Err() != nil {
			_ = chunk(nil, true, true)
			return "", unanswered(contextError(ctx), "put", true)
		}
		n, rerr := io.ReadFull(r, buf)
		last := rerr == io.EOF || rerr == io.ErrUnexpectedEOF
		if rerr != nil && !last { // the source failed: abort, nothing is stored
			if err := chunk(nil, true, true); err != nil {
				return "", unanswered(asError(err), "put", true)
			}
			if _, err := cn.receive(ctx, id, ch); err != nil {
				return "", err
			}
			clean = true
			return "", fmt.Errorf("hoarddb: reading the blob's bytes failed, nothing was stored: %w", rerr)
		}
		if err := chunk(buf[:n], last, false); err != nil {
			return "", unanswered(asError(err), "put", true)
		}
		if last {
			break
		}
		select { // refused early (no such bucket, no right): stop sending
		case answer := <-ch:
			_ = chunk(nil, true, true)
			clean = true
			return "", errorFromAnswer(answer)
		default:
		}
	}
	answer, err := cn.receive(ctx, id, ch)
	if err != nil {
		return "", unanswered(asError(err), "put", true)
	}
	clean = true
	if ok, _ := answer.Lookup("ok").AsInt64OK(); ok != 1 {
		return "", errorFromAnswer(answer)
	}
	s, _ := answer.Lookup("result").StringValueOK()
	return s, nil
}

func asError(err error) *Error {
	if e, ok := err.(*Error); ok {
		return e
	}
	return &Error{Code: 29, CodeName: "CONNECTION_ERROR", Message: err.Error(), Err: err}
}

// PutBlob stores the bytes r gives in this blob store field, with an optional name and
// media type; the blob's id. A store field's blob travels in one message, so it holds at
// most 16 MiB here; keep bigger files in a blob bucket.
func (f *Field) PutBlob(ctx context.Context, r io.Reader, name, typ string) (string, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxMessage-64*1024+1))
	if err != nil {
		return "", fmt.Errorf("hoarddb: reading the blob's bytes failed, nothing was stored: %w", err)
	}
	if len(data) > maxMessage-64*1024 {
		return "", newError(14, "a blob for a store field travels in one message of at most 16 MiB; "+
			"keep bigger files in a blob bucket (Bucket.PutBlob uploads them in chunks)")
	}
	var id string
	args := append(bson.D{{Key: "key", Value: data}}, blobOptions(name, typ)...)
	return id, f.decode(ctx, "put", args, &id)
}

// Stream writes a blob's bytes to w as they arrive, checked against their SHA-256 by the
// server; how many bytes were written.
func (e endpoint) Stream(ctx context.Context, id string, w io.Writer) (int64, error) {
	r, err := e.Open(ctx, id)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(w, r)
	cerr := r.Close()
	if err == nil {
		err = cerr
	}
	return n, err
}

// Open starts reading a blob's bytes; the reader gives them as the server sends them (the
// server sends only as fast as they are read). Close it, read to the end or not.
func (e endpoint) Open(ctx context.Context, id string) (io.ReadCloser, error) {
	c := e.client
	for attempt := 0; ; attempt++ {
		cn, err := c.exclusive(ctx)
		if err != nil {
			return nil, err
		}
		rid, ch := cn.register(4)
		req := append(bson.D{{Key: "op", Value: "stream"}}, e.head...)
		req = append(req, bson.E{Key: "args", Value: bson.D{{Key: "key", Value: id}}})
		sent, err := cn.send(rid, req)
		var first bson.Raw
		if err == nil {
			first, err = cn.receive(ctx, rid, ch)
		}
		if err != nil {
			cn.unregister(rid)
			c.giveBack(cn, false)
			if ce := asError(err); (ce.Code == 29 || ce.serverClosed || !sent) && attempt == 0 && ctx.Err() == nil {
				continue // a read: once more on a new connection
			}
			return nil, err
		}
		s := &blobReader{ctx: ctx, client: c, cn: cn, id: rid, ch: ch}
		if err := s.take(first); err != nil {
			s.finish(s.done)
			return nil, err
		}
		return s, nil
	}
}

// blobReader reads one stream's chunk answers off its exclusive connection.
type blobReader struct {
	ctx    context.Context
	client *Client
	cn     *conn
	id     int64
	ch     chan bson.Raw
	buf    bytes.Reader
	done   bool
	closed bool
	err    error
}

func (s *blobReader) take(msg bson.Raw) error {
	if ok, _ := msg.Lookup("ok").AsInt64OK(); ok != 1 {
		s.done = true
		return errorFromAnswer(msg)
	}
	if end, _ := msg.Lookup("end").BooleanOK(); end {
		s.done = true
		return nil
	}
	_, data, _ := msg.Lookup("chunk").BinaryOK()
	s.buf.Reset(data)
	return nil
}

func (s *blobReader) Read(p []byte) (int, error) {
	for s.buf.Len() == 0 {
		if s.err != nil {
			return 0, s.err
		}
		if s.done {
			s.finish(true)
			return 0, io.EOF
		}
		msg, err := s.cn.receive(s.ctx, s.id, s.ch)
		if err != nil {
			s.err = err
			s.finish(false)
			return 0, err
		}
		if err := s.take(msg); err != nil {
			s.err = err
			s.finish(true)
			return 0, err
		}
	}
	return s.buf.Read(p)
}

func (s *blobReader) finish(clean bool) {
	if s.closed {
		return
	}
	s.closed = true
	s.cn.unregister(s.id)
	s.client.giveBack(s.cn, clean)
}

// Close ends the stream; one not read to its end closes its connection (the rest is not read).
func (s *blobReader) Close() error {
	s.finish(s.done && s.buf.Len() == 0)
	return nil
}
