package hoarddb

// errors.go owns the client's one error type and a sentinel value per server error code.

import (
	"fmt"

	"go.mongodb.org/mongo-driver/bson"
)

// Error is every error the server answers, and every failure of the client itself
// (a lost connection, a timeout, a wrong password), as one type: Code and CodeName are
// the stable ones of docs/user/errors.md; branch on them (or on errors.Is with the
// Err... values below), not on Message.
//
//	if errors.Is(err, hoarddb.ErrDuplicateKey) { ... }
//	var e *hoarddb.Error
//	if errors.As(err, &e) && e.OutcomeUnknown { /* read back before trying again */ }
type Error struct {
	Code     int
	CodeName string
	Message  string
	// Details is the error answer's details document, when the server sent one (a
	// duplicate's index, values and holder: see Duplicate).
	Details bson.Raw
	// OutcomeUnknown is true when a write was sent and its answer lost (the connection
	// broke, the context ended): it may or may not have been applied, and was not sent again.
	OutcomeUnknown bool
	// Err is the cause on the client's side, when there is one (context.Canceled,
	// context.DeadlineExceeded, a network error): errors.Is reaches it through Unwrap.
	Err error

	serverClosed bool // the server's notice before it closed the connection (id: null)
}

// Error says the code's name and the message.
func (e *Error) Error() string {
	if e.Message == "" {
		return "hoarddb: " + e.CodeName
	}
	return "hoarddb: " + e.CodeName + ": " + e.Message
}

// Is reports whether target is an *Error with the same Code: errors.Is(err, ErrNotFound).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Unwrap gives the client-side cause (a context's error, a network error), if any.
func (e *Error) Unwrap() error { return e.Err }

// Duplicate is what a DUPLICATE_KEY error says about the clash.
type Duplicate struct {
	// Index is the unique index that refused the write; empty when the key itself (_id_) was taken.
	Index string `bson:"index"`
	// Values are the index's fields and the values already used.
	Values bson.M `bson:"values"`
	// Holder is the key of the document that holds those values.
	Holder interface{} `bson:"holder"`
	// Key is the _id_ already used, when the key itself was taken.
	Key interface{} `bson:"key"`
}

// DuplicateKeyError is the error of a write refused as DUPLICATE_KEY; errors.As reads it:
//
//	var dup *hoarddb.DuplicateKeyError
//	if errors.As(err, &dup) { fmt.Println(dup.Index, dup.Values, dup.Holder) }
//
// It unwraps to its *Error (Base), so errors.Is(err, ErrDuplicateKey) and errors.As(err, &e *Error) hold too.
type DuplicateKeyError struct {
	Base *Error
	Duplicate
}

// Unwrap gives the *Error.
func (e *DuplicateKeyError) Unwrap() error { return e.Base }

// Error says the code's name and the message.
func (e *DuplicateKeyError) Error() string { return e.Base.Error() }

func newError(code int, format string, args ...interface{}) *Error {
	return &Error{Code: code, CodeName: codeName(code), Message: fmt.Sprintf(format, args...)}
}

func codeName(code int) string {
	if name, ok := codeNames[code]; ok {
		return name
	}
	return fmt.Sprintf("CODE_%d", code)
}

// errorFromAnswer turns an error answer {ok: 0, code, codeName, message, details} into its Go value.
func errorFromAnswer(answer bson.Raw) error {
	e := &Error{Code: 1, CodeName: "INTERNAL_ERROR"}
	if v, err := answer.LookupErr("code"); err == nil {
		if n, ok := v.AsInt64OK(); ok {
			e.Code = int(n)
		}
	}
	if s, ok := answer.Lookup("codeName").StringValueOK(); ok {
		e.CodeName = s
	} else {
		e.CodeName = codeName(e.Code)
	}
	e.Message, _ = answer.Lookup("message").StringValueOK()
	if d, ok := answer.Lookup("details").DocumentOK(); ok {
		e.Details = d
	}
	if e.Code == ErrDuplicateKey.Code {
		dup := &DuplicateKeyError{Base: e}
		if e.Details != nil {
			_ = bson.Unmarshal(e.Details, &dup.Duplicate)
		}
		return dup
	}
	return e
}

// The server's error codes (docs/user/errors.md), one value each, for errors.Is.
var (
	ErrInternal         = &Error{Code: 1, CodeName: "INTERNAL_ERROR"}
	ErrBadValue         = &Error{Code: 2, CodeName: "BAD_VALUE"}
	ErrUnknownOption    = &Error{Code: 3, CodeName: "UNKNOWN_OPTION"}
	ErrInvalidName      = &Error{Code: 4, CodeName: "INVALID_NAME"}
	ErrUnknownStoreType = &Error{Code: 5, CodeName: "UNKNOWN_STORE_TYPE"}
	ErrDatabaseNotFound = &Error{Code: 6, CodeName: "DATABASE_NOT_FOUND"}
	ErrBucketNotFound   = &Error{Code: 7, CodeName: "BUCKET_NOT_FOUND"}
	ErrBucketExists     = &Error{Code: 8, CodeName: "BUCKET_EXISTS"}
	ErrDatabaseExists   = &Error{Code: 9, CodeName: "DATABASE_EXISTS"}
	ErrVerbNotSupported = &Error{Code: 10, CodeName: "VERB_NOT_SUPPORTED"}
	ErrUnknownVerb      = &Error{Code: 11, CodeName: "UNKNOWN_VERB"}
	ErrLimitExceeded    = &Error{Code: 12, CodeName: "LIMIT_EXCEEDED"}
	ErrNotADocument     = &Error{Code: 13, CodeName: "NOT_A_DOCUMENT"}
	ErrDocumentTooLarge = &Error{Code: 14, CodeName: "DOCUMENT_TOO_LARGE"}
	ErrDuplicateKey     = &Error{Code: 15, CodeName: "DUPLICATE_KEY"}
	ErrNotFound         = &Error{Code: 16, CodeName: "NOT_FOUND"}
	ErrDataDirLocked    = &Error{Code: 17, CodeName: "DATA_DIR_LOCKED"}
	ErrCorruptData      = &Error{Code: 18, CodeName: "CORRUPT_DATA"}
	ErrClosed           = &Error{Code: 19, CodeName: "CLOSED"}
	ErrSyntax           = &Error{Code: 20, CodeName: "SYNTAX_ERROR"}
	ErrMissingKey       = &Error{Code: 21, CodeName: "MISSING_KEY"}
	ErrInvalidArgument  = &Error{Code: 22, CodeName: "INVALID_ARGUMENT"}
	ErrStorage          = &Error{Code: 23, CodeName: "STORAGE_ERROR"}
	ErrIndexNotReady    = &Error{Code: 24, CodeName: "INDEX_NOT_READY"}
	ErrL2HardLimit      = &Error{Code: 25, CodeName: "L2_HARD_LIMIT"}
	ErrTooManyElements  = &Error{Code: 26, CodeName: "TOO_MANY_ELEMENTS"}
	ErrAuthFailed       = &Error{Code: 27, CodeName: "AUTH_FAILED"}
	ErrUnauthorized     = &Error{Code: 28, CodeName: "UNAUTHORIZED"}
	ErrConnection       = &Error{Code: 29, CodeName: "CONNECTION_ERROR"}
	ErrTimeout          = &Error{Code: 30, CodeName: "TIMEOUT"}
	ErrProtocol         = &Error{Code: 31, CodeName: "PROTOCOL_ERROR"}
	ErrClaimExpired     = &Error{Code: 32, CodeName: "CLAIM_EXPIRED"}
	ErrRegexTimeout     = &Error{Code: 33, CodeName: "REGEX_TIMEOUT"}
	// A cluster's partition whose owner does not answer, or no etcd to ask (docs/user/cluster.md).
	ErrPartitionUnavailable = &Error{Code: 34, CodeName: "PARTITION_UNAVAILABLE"}
	ErrClusterUnavailable   = &Error{Code: 35, CodeName: "CLUSTER_UNAVAILABLE"}
	// A cursor that is not open: read to its end, closed, timed out, or another connection's.
	ErrCursorNotFound = &Error{Code: 36, CodeName: "CURSOR_NOT_FOUND"}
	// A write picking one document of a spread bucket whose pick kept changing: nothing written, send it again.
	ErrWriteConflict = &Error{Code: 37, CodeName: "WRITE_CONFLICT"}
)

// sentinels are the Err values by code (a test holds them to codeNames, and codeNames to the server's).
var sentinels = []*Error{ErrInternal, ErrBadValue, ErrUnknownOption, ErrInvalidName, ErrUnknownStoreType,
	ErrDatabaseNotFound, ErrBucketNotFound, ErrBucketExists, ErrDatabaseExists, ErrVerbNotSupported,
	ErrUnknownVerb, ErrLimitExceeded, ErrNotADocument, ErrDocumentTooLarge, ErrDuplicateKey, ErrNotFound,
	ErrDataDirLocked, ErrCorruptData, ErrClosed, ErrSyntax, ErrMissingKey, ErrInvalidArgument, ErrStorage,
	ErrIndexNotReady, ErrL2HardLimit, ErrTooManyElements, ErrAuthFailed, ErrUnauthorized, ErrConnection,
	ErrTimeout, ErrProtocol, ErrClaimExpired, ErrRegexTimeout, ErrPartitionUnavailable, ErrClusterUnavailable,
	ErrCursorNotFound, ErrWriteConflict}
