package hoarddb

// admin.go owns the server's maintenance operations (admin): an online check and a backup,
// both made while the server goes on serving.

import (
	"context"

	"go.mongodb.org/mongo-driver/bson"
)

// BucketName names a bucket of the server, with its store type.
type BucketName struct {
	DB     string `bson:"db"`
	Bucket string `bson:"bucket"`
	Type   string `bson:"type"`
}

// CheckProblem is one thing a check found wrong: in which file, what, and what to do about it.
type CheckProblem struct {
	File    string
	Problem string
	Action  string
}

// CheckedBucket is what the check found in one bucket.
type CheckedBucket struct {
	BucketName
	// Checked is false for a store type whose files cannot be walked while the server
	// serves (fifo, lifo, blob); `hoarddb check DIR` checks those with the server stopped.
	Checked  bool
	Problems []CheckProblem
	// More is how many problems were found beyond those listed.
	More int64
}

// CheckReport is an online check's account, bucket by bucket.
type CheckReport struct {
	Buckets []CheckedBucket
}

// OK is whether no bucket checked had a problem.
func (r CheckReport) OK() bool {
	for _, b := range r.Buckets {
		if len(b.Problems) > 0 || b.More > 0 {
			return false
		}
	}
	return true
}

// Check checks the server's buckets while it serves (admin): every bucket when db is
// empty, the database's when bucket is empty, else that one bucket. Each bucket is
// walked in one read transaction, so writes go on meanwhile. Problems found are in the
// report; an error is a check refused (ErrDatabaseNotFound, ErrBucketNotFound, ErrUnauthorized).
func (c *Client) Check(ctx context.Context, db, bucket string) (CheckReport, error) {
	var fields bson.D
	if db != "" {
		fields = append(fields, bson.E{Key: "db", Value: db})
	}
	if bucket != "" {
		fields = append(fields, bson.E{Key: "bucket", Value: bucket})
	}
	var answer struct {
		Buckets []struct {
			BucketName `bson:",inline"`
			Checked    bool       `bson:"checked"`
			Problems   [][]string `bson:"problems"` // [file, problem, action]
			More       int64      `bson:"more"`
		} `bson:"buckets"`
	}
	if err := c.decode(ctx, "check", fields, &answer); err != nil {
		return CheckReport{}, err
	}
	report := CheckReport{Buckets: make([]CheckedBucket, 0, len(answer.Buckets))}
	for _, b := range answer.Buckets {
		checked := CheckedBucket{BucketName: b.BucketName, Checked: b.Checked, More: b.More}
		for _, p := range b.Problems {
			p = append(p, "", "", "")
			checked.Problems = append(checked.Problems, CheckProblem{File: p[0], Problem: p[1], Action: p[2]})
		}
		report.Buckets = append(report.Buckets, checked)
	}
	return report, nil
}

// BackupResult is what a backup copied, where, and in how many seconds.
type BackupResult struct {
	Path    string       `bson:"path"`
	Buckets []BucketName `bson:"buckets"`
	Seconds float64      `bson:"seconds"`
}

// Backup has the server copy its data directory, while it serves, into path (admin): an
// absolute path, on the server's machine, of a new or empty folder outside the data
// directory (ErrBadValue otherwise). Each bucket is copied as one moment of it; the copy
// opens as a data directory. It is not sent again when its answer is lost.
func (c *Client) Backup(ctx context.Context, path string) (BackupResult, error) {
	var out BackupResult
	return out, c.decode(ctx, "backup", bson.D{{Key: "path", Value: path}}, &out)
}
