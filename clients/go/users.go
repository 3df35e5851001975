package hoarddb

// users.go owns the server's user operations (admin): SCRAM keys are derived here, so a
// password never travels.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"

	"go.mongodb.org/mongo-driver/bson"
	"golang.org/x/text/unicode/norm"
)

// User is a user of the server and their roles ("admin", "readWrite:app", "read:app", "dbAdmin:app").
type User struct {
	Name  string   `bson:"name"`
	Roles []string `bson:"roles"`
}

// credentials are what the server keeps of a password: a salt, an iteration count and two keys.
func credentials(password string) bson.D {
	salt := make([]byte, 16)
	_, _ = rand.Read(salt)
	const iterations = 100000
	salted := pbkdf2SHA256([]byte(norm.NFKC.String(password)), salt, iterations)
	stored := sha256.Sum256(hmacSHA256(salted, []byte("Client Key")))
	return bson.D{{Key: "mechanism", Value: "SCRAM-SHA-256"}, {Key: "salt", Value: salt},
		{Key: "iterations", Value: iterations}, {Key: "stored_key", Value: stored[:]},
		{Key: "server_key", Value: hmacSHA256(salted, []byte("Server Key"))}}
}

// CreateUser adds a user with a password and roles.
func (c *Client) CreateUser(ctx context.Context, name, password string, roles ...string) error {
	if password == "" {
		return newError(2, "a password is a non-empty string")
	}
	_, err := c.call(ctx, "create_user", bson.D{{Key: "user", Value: name},
		{Key: "credentials", Value: credentials(password)}, {Key: "roles", Value: append([]string{}, roles...)}})
	return err
}

// UpdateUser changes a user's password (when not empty) and roles (when not nil); the
// user's open connections stay logged in.
func (c *Client) UpdateUser(ctx context.Context, name, password string, roles []string) error {
	fields := bson.D{{Key: "user", Value: name}}
	if password != "" {
		fields = append(fields, bson.E{Key: "credentials", Value: credentials(password)})
	}
	if roles != nil {
		fields = append(fields, bson.E{Key: "roles", Value: roles})
	}
	_, err := c.call(ctx, "update_user", fields)
	return err
}

// SetRoles replaces a user's roles ("admin", "readWrite:app", "read:app", "dbAdmin:app");
// none takes every role away. The user's open connections use the new roles from their
// next request. An unknown user is ErrNotFound.
func (c *Client) SetRoles(ctx context.Context, name string, roles ...string) error {
	_, err := c.call(ctx, "set_roles", bson.D{{Key: "user", Value: name}, {Key: "roles", Value: append([]string{}, roles...)}})
	return err
}

// DropUser removes a user.
func (c *Client) DropUser(ctx context.Context, name string) error {
	_, err := c.call(ctx, "drop_user", bson.D{{Key: "user", Value: name}})
	return err
}

// ListUsers are every user and their roles.
func (c *Client) ListUsers(ctx context.Context) ([]User, error) {
	var out []User
	return out, c.decode(ctx, "list_users", nil, &out)
}
