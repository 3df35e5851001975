module hoarddb.dev/client

go 1.19

// Dependencies come from Debian's packages, as source under /usr/share/gocode
// (apt-get install golang-go golang-mongodb-mongo-driver-dev, which brings
// golang-golang-x-crypto-dev): each requirement is replaced by its installed directory,
// so nothing is fetched. README.md says why. (x/text is at the version x/crypto asks for.)
require (
	github.com/go-stack/stack v1.8.0
	go.mongodb.org/mongo-driver v1.8.4
	golang.org/x/crypto v0.4.0
	golang.org/x/sys v0.3.0
	golang.org/x/text v0.5.0
)

replace (
	github.com/go-stack/stack => /usr/share/gocode/src/github.com/go-stack/stack
	go.mongodb.org/mongo-driver => /usr/share/gocode/src/go.mongodb.org/mongo-driver
	golang.org/x/crypto => /usr/share/gocode/src/golang.org/x/crypto
	golang.org/x/sys => /usr/share/gocode/src/golang.org/x/sys
	golang.org/x/text => /usr/share/gocode/src/golang.org/x/text
)
