// Command hoarddb-gobench times the Go client: one operation at a time from 1 or more
// goroutines sharing one Client, printing ops/s as JSON. bench/go_client.py runs it beside
// the Python client on the same server.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	hoarddb "hoarddb.dev/client"
)

func main() {
	url := flag.String("url", "hoarddb://127.0.0.1:7070/?insecure=true", "the server")
	op := flag.String("op", "get", "get (a hash point read) or push (a fifo write)")
	n := flag.Int("n", 5000, "operations in all")
	workers := flag.Int("workers", 1, "goroutines sharing the client")
	db := flag.String("db", "bench", "database of the buckets Hash (keys k0..k999) and Queue")
	flag.Parse()
	ctx := context.Background()
	client, err := hoarddb.Connect(ctx, *url)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	hash := client.Database(*db).Bucket("Hash")
	queue := client.Database(*db).Bucket("Queue")
	doc := bson.M{"Author": "Bob", "Text": "Nice photo!", "N": 1}
	var next int64
	var wg sync.WaitGroup
	errs := make(chan error, *workers)
	start := time.Now()
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out bson.Raw
			for {
				i := atomic.AddInt64(&next, 1)
				if i > int64(*n) {
					return
				}
				var err error
				if *op == "get" {
					_, err = hash.Get(ctx, fmt.Sprintf("k%d", i%1000), &out)
				} else {
					err = queue.Push(ctx, doc)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		log.Fatal(err)
	}
	_ = json.NewEncoder(os.Stdout).Encode(map[string]interface{}{
		"op": *op, "n": *n, "workers": *workers, "seconds": elapsed.Seconds(),
		"ops_per_s": float64(*n) / elapsed.Seconds()})
}
