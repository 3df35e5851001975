// Package hoarddb is a client of a hoardDB server, for Go programs.
//
//	client, err := hoarddb.Connect(ctx, "hoarddb://ann:secret@db.example:7070/?tls_fingerprint=AB:CD:...")
//	if err != nil { ... }
//	defer client.Close()
//	comments := client.Database("app").Bucket("Comments")
//	err = comments.Push(ctx, bson.M{"Author": "Bob", "Text": "Nice photo!"})
//	err = client.Database("app").Bucket("Property").Doc("p1").Field("Expenses").Push(ctx, expense)
//
// The package has these main types: Client (a pool of connections, safe for many
// goroutines, pipelining their requests), Database, Bucket (the verbs of its store type as
// methods), Document and Field (a document's store fields and their verbs), and Error (every
// error, with the server's stable Code and CodeName; test with errors.Is and the Err values).
// Documents are bson.D, bson.M or structs with bson tags, from the MongoDB driver's bson
// package. Every call takes a context. docs/user/go.md in the repository is the guide.
package hoarddb
