module hoarddb.dev/client

go 1.19

// Dependencies come from Debian's packages, as source under /usr/share/gocode
// (apt-get install golang-go golang-mongodb-mongo-driver-dev): each requirement is
// replaced by its installed directory, so nothing is fetched. README.md says why.
require (
	github.com/go-stack/stack v1.8.0
	go.mongodb.org/mongo-driver v1.8.4
	golang.org/x/text v0.4.0
)

replace (
	github.com/go-stack/stack => /usr/share/gocode/src/github.com/go-stack/stack
	go.mongodb.org/mongo-driver => /usr/share/gocode/src/go.mongodb.org/mongo-driver
	golang.org/x/text => /usr/share/gocode/src/golang.org/x/text
)
