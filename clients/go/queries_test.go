package hoarddb

// queries_test.go runs a hash bucket's query verbs with their options against the TLS
// server: find's sort, skip, limit and projection, distinct, aggregate, update's options
// and find_and_modify, each with a refusal.

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/bson"
)

type ticket struct {
	ID       string    `bson:"_id_"`
	Title    string    `bson:"Title"`
	Category string    `bson:"Category"`
	Cost     float64   `bson:"Cost,omitempty"`
	Tags     []string  `bson:"Tags"`
	Date     time.Time `bson:"Date"`
}

// tickets is a hash bucket holding the four tickets of docs/user/queries.md.
func tickets(t *testing.T, c *Client) *Bucket {
	t.Helper()
	b := fresh(t, c, bson.D{{Key: "type", Value: "hash"}, {Key: "indices", Value: bson.A{"Category"}}})
	day := func(month time.Month, d int) time.Time { return time.Date(2024, month, d, 0, 0, 0, 0, time.UTC) }
	_, err := b.BatchInsert(ctx(t), []ticket{
		{ID: "t1", Title: "Leak in 3B", Category: "repairs", Cost: 120, Tags: []string{"water", "urgent"}, Date: day(5, 2)},
		{ID: "t2", Title: "Broken lock", Category: "repairs", Cost: 45.5, Tags: []string{"security"}, Date: day(5, 9)},
		{ID: "t3", Title: "Property tax", Category: "tax", Cost: 900, Tags: []string{}, Date: day(4, 30)},
		{ID: "t4", Title: "Noise complaint", Category: "tenants", Tags: []string{"urgent"}, Date: day(5, 11)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// refused checks that err is the refusal want, with a message.
func refused(t *testing.T, what string, err error, want *Error) {
	t.Helper()
	var e *Error
	if !errors.Is(err, want) || !errors.As(err, &e) || e.Message == "" {
		t.Errorf("%s: want %s, got %v", what, want.CodeName, err)
	}
}

func ids(docs []bson.M) []string {
	out := []string{}
	for _, d := range docs {
		out = append(out, d["_id_"].(string))
	}
	return out
}

func TestFindOptions(t *testing.T) {
	c := admin(t)
	b := tickets(t, c)
	var newest []bson.M
	_, err := b.Find(ctx(t), nil, &newest, FindOptions{Sort: bson.D{{Key: "Date", Value: -1}}, Limit: 2,
		Projection: bson.M{"Title": 1}})
	want := []bson.M{{"_id_": "t4", "Title": "Noise complaint"}, {"_id_": "t2", "Title": "Broken lock"}}
	if err != nil || !reflect.DeepEqual(newest, want) {
		t.Fatalf("find sorted newest first, limited, projected: %v %v", newest, err)
	}
	var page []bson.M
	// two sort keys, in their order: category ascending, then cost descending; skip one
	_, err = b.Find(ctx(t), bson.M{}, &page, FindOptions{Sort: bson.D{{Key: "Category", Value: 1}, {Key: "Cost", Value: -1}},
		Skip: 1, Limit: 2})
	if err != nil || !reflect.DeepEqual(ids(page), []string{"t2", "t3"}) {
		t.Fatalf("find sorted by two keys, skip 1, limit 2: %v %v", ids(page), err)
	}
	var dropped []bson.M
	if _, err := b.Find(ctx(t), bson.M{"_id_": "t1"}, &dropped, FindOptions{Projection: bson.M{"Tags": 0, "Date": 0}}); err != nil ||
		len(dropped) != 1 || dropped[0]["Tags"] != nil || dropped[0]["Title"] != "Leak in 3B" {
		t.Fatalf("find dropping fields: %v %v", dropped, err)
	}
	var repairs []ticket
	how, err := b.Search(ctx(t), bson.M{"Category": "repairs"}, &repairs, FindOptions{Sort: bson.D{{Key: "Cost", Value: 1}}, Limit: 1})
	if err != nil || len(repairs) != 1 || repairs[0].ID != "t2" || how.IndexUsed == "" || how.IndexUsed == "none — full scan" {
		t.Fatalf("search with a sort and a limit, by its index: %+v %+v %v", repairs, how, err)
	}

	_, err = b.Find(ctx(t), nil, &page, FindOptions{Sort: bson.D{{Key: "Date", Value: "newest"}}})
	refused(t, "a sort direction that is not 1 or -1", err, ErrBadValue)
	_, err = b.Find(ctx(t), nil, &page, FindOptions{Projection: bson.M{"Title": 1, "Tags": 0}})
	refused(t, "a projection that keeps and drops", err, ErrBadValue)
	_, err = b.Find(ctx(t), nil, &page, FindOptions{Skip: -1})
	refused(t, "skip -1", err, ErrBadValue)
	_, err = b.Find(ctx(t), nil, &page, FindOptions{Limit: -5})
	refused(t, "limit -5", err, ErrBadValue)
}

func TestExistsRefusal(t *testing.T) {
	c := admin(t)
	b := tickets(t, c)
	if yes, err := b.Exists(ctx(t), bson.M{"_id_": "t1"}); err != nil || !yes {
		t.Fatalf("exists by {_id_: key}: %v %v", yes, err)
	}
	_, err := b.Exists(ctx(t), bson.M{"Title": "Leak in 3B"})
	refused(t, "exists by another field", err, ErrBadValue)
	q := fresh(t, c, bson.D{{Key: "type", Value: "fifo"}})
	_, err = q.Exists(ctx(t), "t1")
	refused(t, "exists on a fifo", err, ErrVerbNotSupported)
}

func TestDistinct(t *testing.T) {
	c := admin(t)
	b := tickets(t, c)
	var tags []string
	if err := b.Distinct(ctx(t), "Tags", nil, &tags); err != nil || !reflect.DeepEqual(tags, []string{"security", "urgent", "water"}) {
		t.Fatalf("distinct of an array field, in sort order: %v %v", tags, err)
	}
	var categories []interface{}
	err := b.Distinct(ctx(t), "Category", bson.M{"Cost": bson.M{"$exists": true}}, &categories)
	if err != nil || !reflect.DeepEqual(categories, []interface{}{"repairs", "tax"}) {
		t.Fatalf("distinct with a filter: %v %v", categories, err)
	}
	refused(t, "distinct of no field", b.Distinct(ctx(t), "", nil, &tags), ErrBadValue)
}

func TestAggregate(t *testing.T) {
	c := admin(t)
	b := tickets(t, c)
	may := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	type total struct {
		Category string  `bson:"_id"`
		Total    float64 `bson:"total"`
		N        int     `bson:"n"`
	}
	var totals []total
	_, err := b.Aggregate(ctx(t), []bson.D{
		{{Key: "$match", Value: bson.M{"Date": bson.M{"$gte": may}}}},
		{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$Category"}, {Key: "total", Value: bson.M{"$sum": "$Cost"}},
			{Key: "n", Value: bson.M{"$count": bson.M{}}}}}},
		{{Key: "$sort", Value: bson.M{"total": -1}}},
	}, &totals)
	want := []total{{"repairs", 165.5, 2}, {"tenants", 0, 1}}
	if err != nil || !reflect.DeepEqual(totals, want) {
		t.Fatalf("aggregate: %+v %v", totals, err)
	}
	var repairs []bson.M
	how, err := b.Aggregate(ctx(t), bson.A{bson.M{"$match": bson.M{"Category": "repairs"}}, bson.M{"$count": "n"}}, &repairs,
		AggregateOptions{Explain: true})
	if err != nil || len(repairs) != 1 || repairs[0]["n"] != int32(2) || how.IndexUsed == "none — full scan" || how.Explain == nil {
		t.Fatalf("aggregate with a leading $match on an index, explained: %v %+v %v", repairs, how, err)
	}
	_, err = b.Aggregate(ctx(t), bson.A{bson.M{"$facet": bson.M{}}}, &repairs)
	refused(t, "a stage hoardDB does not have", err, ErrBadValue)
}

func TestUpdateOptions(t *testing.T) {
	c := admin(t)
	b := tickets(t, c)
	res, err := b.Update(ctx(t), bson.M{"Category": "repairs"}, bson.M{"$set": bson.M{"Seen": true}}, UpdateOptions{OnlyFirst: true})
	if err != nil || res.Matched != 1 || res.Modified != 1 || res.Upserted != nil {
		t.Fatalf("update of the first match only: %+v %v", res, err)
	}
	if n, _ := b.Count(ctx(t), bson.M{"Seen": true}); n != 1 {
		t.Fatalf("OnlyFirst changed %d documents", n)
	}
	res, err = b.Update(ctx(t), bson.M{"_id_": "t1"}, bson.M{"$set": bson.M{"Tags.$[t]": "wet"}},
		UpdateOptions{ArrayFilters: bson.A{bson.M{"t": "water"}}})
	var t1 ticket
	if _, _ = b.Get(ctx(t), "t1", &t1); err != nil || res.Modified != 1 || !reflect.DeepEqual(t1.Tags, []string{"wet", "urgent"}) {
		t.Fatalf("update with arrayFilters: %+v %v %v", res, t1.Tags, err)
	}
	res, err = b.Update(ctx(t), bson.M{"_id_": "counter"}, bson.M{"$inc": bson.M{"n": 1}, "$setOnInsert": bson.M{"Created": "today"}},
		UpdateOptions{Upsert: true})
	var counter bson.M
	if _, _ = b.Get(ctx(t), "counter", &counter); err != nil || res.Upserted != "counter" || counter["Created"] != "today" {
		t.Fatalf("upsert: %+v %v %v", res, counter, err)
	}
	_, err = b.Update(ctx(t), bson.M{"_id_": "t1"}, bson.M{"$set": bson.M{"Tags.$[x]": "dry"}}, UpdateOptions{})
	refused(t, "an identifier without its array filter", err, ErrBadValue)
	if _, _ = b.Get(ctx(t), "t1", &t1); t1.Tags[0] != "wet" {
		t.Fatalf("a refused update wrote: %v", t1.Tags)
	}
}

func TestFindAndModify(t *testing.T) {
	c := admin(t)
	b := tickets(t, c)
	var counter struct {
		ID string `bson:"_id_"`
		N  int    `bson:"n"`
	}
	found, err := b.FindAndModify(ctx(t), bson.M{"_id_": "orders"}, bson.M{"$inc": bson.M{"n": 1}}, &counter,
		FindAndModifyOptions{New: true, Upsert: true})
	if err != nil || !found || counter.ID != "orders" || counter.N != 1 {
		t.Fatalf("find_and_modify upserting a counter, new: %v %+v %v", found, counter, err)
	}
	found, err = b.FindAndModify(ctx(t), bson.M{"_id_": "orders"}, bson.M{"$inc": bson.M{"n": 1}}, &counter)
	if err != nil || !found || counter.N != 1 {
		t.Fatalf("find_and_modify answers the document as it was: %v %+v %v", found, counter, err)
	}
	var job bson.M
	found, err = b.FindAndModify(ctx(t), bson.M{"Category": "repairs", "Taken": bson.M{"$exists": false}},
		bson.M{"$set": bson.M{"Taken": "worker-1"}}, &job,
		FindAndModifyOptions{Sort: bson.D{{Key: "Date", Value: -1}}, Projection: bson.M{"Title": 1}, New: true})
	if err != nil || !found || !reflect.DeepEqual(job, bson.M{"_id_": "t2", "Title": "Broken lock"}) {
		t.Fatalf("find_and_modify of the newest match, projected: %v %v", job, err)
	}
	var t1 ticket
	found, err = b.FindAndModify(ctx(t), bson.M{"_id_": "t1"}, bson.M{"$set": bson.M{"Tags.$[u]": "URGENT"}}, &t1,
		FindAndModifyOptions{New: true, ArrayFilters: bson.A{bson.M{"u": "urgent"}}})
	if err != nil || !found || !reflect.DeepEqual(t1.Tags, []string{"water", "URGENT"}) {
		t.Fatalf("find_and_modify with arrayFilters: %v %v", t1.Tags, err)
	}
	var gone ticket
	found, err = b.FindAndModify(ctx(t), bson.M{"_id_": "t3"}, nil, &gone, FindAndModifyOptions{Remove: true})
	if err != nil || !found || gone.Title != "Property tax" {
		t.Fatalf("find_and_modify removing: %v %+v %v", found, gone, err)
	}
	if yes, _ := b.Exists(ctx(t), "t3"); yes {
		t.Fatal("the removed document is still there")
	}
	var none bson.M
	found, err = b.FindAndModify(ctx(t), bson.M{"_id_": "nobody"}, bson.M{"$set": bson.M{"x": 1}}, &none)
	if err != nil || found || none != nil {
		t.Fatalf("find_and_modify matching nothing: %v %v %v", found, none, err)
	}
	_, err = b.FindAndModify(ctx(t), bson.M{"_id_": "t1"}, bson.M{"$set": bson.M{"x": 1}}, &none, FindAndModifyOptions{Remove: true})
	refused(t, "an update and remove together", err, ErrBadValue)
	if yes, _ := b.Exists(ctx(t), "t1"); !yes {
		t.Fatal("a refused find_and_modify removed its document")
	}
}

func TestWindow(t *testing.T) {
	c := admin(t)
	index := bson.D{{Key: "name", Value: "hourly"}, {Key: "fields", Value: bson.A{"At", "Tag"}}, {Key: "ranked", Value: true},
		{Key: "timeRange", Value: bson.D{{Key: "on", Value: "At"}, {Key: "range", Value: 3600}, {Key: "step", Value: 900}}}}
	b := fresh(t, c, bson.D{{Key: "type", Value: "hash"}, {Key: "indices", Value: bson.A{index}}})
	hour := time.Date(2024, 5, 2, 10, 0, 0, 0, time.UTC)
	_, err := b.BatchInsert(ctx(t), []bson.M{{"At": hour, "Tag": "go"}, {"At": hour.Add(time.Minute), "Tag": "py"},
		{"At": hour.Add(2 * time.Minute), "Tag": "go"}})
	if err != nil {
		t.Fatal(err)
	}
	type count struct {
		Value string `bson:"value"`
		Count int    `bson:"count"`
	}
	var w struct {
		Start time.Time `bson:"start"`
		Count int       `bson:"count"`
		Field string    `bson:"field"`
		Top   []count   `bson:"top"`
	}
	if err := b.Window(ctx(t), "hourly", WindowOptions{ByStart: hour, Top: 1}, &w); err != nil {
		t.Fatal(err)
	}
	if !w.Start.Equal(hour) || w.Count != 3 || w.Field != "Tag" || !reflect.DeepEqual(w.Top, []count{{"go", 2}}) {
		t.Fatalf("the window's count and top: %+v", w)
	}
	refused(t, "two windows", b.Window(ctx(t), "hourly", WindowOptions{Newest: true, Oldest: true}, &w), ErrBadValue)
}
