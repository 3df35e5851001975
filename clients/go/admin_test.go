package hoarddb

// admin_test.go runs the server's admin operations against the TLS server: roles set on a
// logged-in user, an online check and a backup, each with its refusals.

import (
	"os"
	"path/filepath"
	"testing"

	"go.mongodb.org/mongo-driver/bson"
)

func reader(t *testing.T) *Client {
	return connect(t, tlsServer.url("reader:"+readerPassword, "tls_fingerprint="+tlsServer.fingerprint))
}

func TestSetRoles(t *testing.T) {
	c := admin(t)
	_ = c.DropUser(ctx(t), "roller")
	if err := c.CreateUser(ctx(t), "roller", "rolls", "readWrite:app"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DropUser(ctx(t), "roller") })
	b := fresh(t, c, bson.D{{Key: "type", Value: "fifo"}})
	r := connect(t, tlsServer.url("roller:rolls", "tls_fingerprint="+tlsServer.fingerprint))
	rb := r.Database("app").Bucket(b.Name)
	if err := rb.Push(ctx(t), bson.M{"n": 1}); err != nil {
		t.Fatalf("a readWrite user's push: %v", err)
	}
	if err := c.SetRoles(ctx(t), "roller", "read:app"); err != nil {
		t.Fatal(err)
	}
	users, _ := c.ListUsers(ctx(t))
	var roles []string
	for _, u := range users {
		if u.Name == "roller" {
			roles = u.Roles
		}
	}
	if len(roles) != 1 || roles[0] != "read:app" {
		t.Fatalf("roles after set_roles: %v", roles)
	}
	// the open connection uses the new roles from its next request
	refused(t, "a push once the role is read", rb.Push(ctx(t), bson.M{"n": 2}), ErrUnauthorized)
	if n, err := rb.Length(ctx(t)); err != nil || n != 1 {
		t.Fatalf("a read with the read role: %d %v", n, err)
	}
	if err := c.SetRoles(ctx(t), "roller"); err != nil {
		t.Fatal(err)
	}
	_, err := rb.Length(ctx(t))
	refused(t, "a read with no role left", err, ErrUnauthorized)

	refused(t, "set_roles of an unknown user", c.SetRoles(ctx(t), "nobody-here", "read:app"), ErrNotFound)
	refused(t, "set_roles by a user who is not admin", reader(t).SetRoles(ctx(t), "roller", "admin"), ErrUnauthorized)
}

func TestCheck(t *testing.T) {
	c := admin(t)
	b := tickets(t, c)
	report, err := c.Check(ctx(t), "app", b.Name)
	if err != nil || len(report.Buckets) != 1 || !report.OK() {
		t.Fatalf("check of one bucket: %+v %v", report, err)
	}
	got := report.Buckets[0]
	if got.DB != "app" || got.Bucket != b.Name || got.Type != "hash" || !got.Checked || len(got.Problems) != 0 {
		t.Fatalf("the checked bucket: %+v", got)
	}
	q := fresh(t, c, bson.D{{Key: "type", Value: "fifo"}})
	report, err = c.Check(ctx(t), "app", "")
	seen := map[string]CheckedBucket{}
	for _, x := range report.Buckets {
		seen[x.Bucket] = x
	}
	if err != nil || !seen[b.Name].Checked || seen[q.Name].Type != "fifo" || !seen[q.Name].Checked {
		t.Fatalf("check of a database: the hash bucket and the fifo both checked: %+v %v", seen, err)
	}

	_, err = c.Check(ctx(t), "nosuchdb", "")
	refused(t, "check of an unknown database", err, ErrDatabaseNotFound)
	_, err = c.Check(ctx(t), "app", "NoSuchBucket")
	refused(t, "check of an unknown bucket", err, ErrBucketNotFound)
	_, err = c.Check(ctx(t), "", b.Name)
	refused(t, "check of a bucket without its database", err, ErrInvalidArgument)
	_, err = reader(t).Check(ctx(t), "app", b.Name)
	refused(t, "check by a user who is not admin", err, ErrUnauthorized)
}

func TestBackup(t *testing.T) {
	c := admin(t)
	b := tickets(t, c)
	target := filepath.Join(t.TempDir(), "copy")
	res, err := c.Backup(ctx(t), target)
	if err != nil || res.Path != target {
		t.Fatalf("backup: %+v %v", res, err)
	}
	found := false
	for _, x := range res.Buckets {
		found = found || x == BucketName{DB: "app", Bucket: b.Name, Type: "hash"}
	}
	if !found {
		t.Fatalf("the backup does not list the bucket %s: %+v", b.Name, res.Buckets)
	}
	if _, err := os.Stat(filepath.Join(target, "app", b.Name)); err != nil {
		t.Fatalf("the bucket's copy: %v", err)
	}
	// the copy opens as a data directory, and its buckets are sound
	if out, err := python("-m", "hoarddb.cli", "check", target).CombinedOutput(); err != nil {
		t.Fatalf("hoarddb check of the backup: %v\n%s", err, out)
	}

	_, err = c.Backup(ctx(t), "relative/copy")
	refused(t, "a backup to a relative path", err, ErrBadValue)
	_, err = c.Backup(ctx(t), target)
	refused(t, "a backup into a folder that is not empty", err, ErrBadValue)
	_, err = c.Backup(ctx(t), filepath.Join(tlsServer.data, "inside"))
	refused(t, "a backup inside the data directory", err, ErrBadValue)
	_, err = reader(t).Backup(ctx(t), filepath.Join(t.TempDir(), "copy2"))
	refused(t, "a backup by a user who is not admin", err, ErrUnauthorized)
}
