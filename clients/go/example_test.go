package hoarddb_test

// example_test.go is the worked example of docs/user/go.md (property-sage's expense write
// and dashboard reads), run against a real server; TestDocsShowTheExample holds the page to it.

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	hoarddb "hoarddb.dev/client"
)

// --- example: begin

// Expense is one expense, as the application's Go API already declares it.
type Expense struct {
	ID       string `bson:"ID"`
	Amount   int    `bson:"Amount"`
	Category string `bson:"Category"`
	Date     string `bson:"Date"` // 2026-03-14
}

// CreateProperty declares the Property bucket: one document per property, its stores on it.
func CreateProperty(ctx context.Context, db *hoarddb.Database) (*hoarddb.Bucket, error) {
	return db.CreateBucket(ctx, "Property", bson.D{
		{Key: "type", Value: "hash"},
		{Key: "store_fields", Value: bson.A{
			bson.M{"name": "Expenses", "type": "lifo"},      // newest-first feed
			bson.M{"name": "ExpenseByID", "type": "hash"},   // the record, by id
			bson.M{"name": "ExpenseDates", "type": "btree"}, // month report, keyed <date>/<id>
			bson.M{"name": "Tickets", "type": "heap"},
			bson.M{"name": "Documents", "type": "blob"},
		}},
		{Key: "indices", Value: bson.A{"CompanyID"}},
	})
}

// RecordExpense writes the three copies of one expense: hoardDB reconciles none of them,
// so every write of the application writes all three.
func RecordExpense(ctx context.Context, property *hoarddb.Document, e Expense) error {
	if err := property.Field("Expenses").Push(ctx, e); err != nil {
		return err
	}
	if _, err := property.Field("ExpenseByID").Put(ctx, e.ID, e); err != nil {
		return err
	}
	_, err := property.Field("ExpenseDates").Put(ctx, e.Date+"/"+e.ID, e)
	return err
}

// CorrectExpense rewrites the record and the month report's copy under their keys, and
// logs the correction in the feed as a new element (a feed element has no key to rewrite).
func CorrectExpense(ctx context.Context, property *hoarddb.Document, e Expense) error {
	return RecordExpense(ctx, property, e)
}

// Dashboard is what a property's screen shows. It reads with peek and list, never pop:
// pop removes what it returns.
type Dashboard struct {
	Latest     []Expense // newest first
	Month      []Expense // in date order
	Total      int
	TopTicket  bson.M
	Properties []string // the company's properties
	IndexUsed  string   // how they were found
}

// LoadDashboard reads the dashboard of one property of a company for one month ("2026-03").
func LoadDashboard(ctx context.Context, properties *hoarddb.Bucket, companyID, propertyID, month string) (Dashboard, error) {
	var d Dashboard
	p := properties.Doc(propertyID)
	if err := p.Field("Expenses").PeekN(ctx, 10, &d.Latest); err != nil {
		return d, err
	}
	// a btree store field has no range verb: list continues in key order after a key,
	// and the reader stops when the date leaves the month
	after := month + "-00"
	for {
		var page []struct {
			Key string  `bson:"key"`
			Doc Expense `bson:"doc"`
		}
		if err := p.Field("ExpenseDates").List(ctx, hoarddb.ListOptions{After: after, Limit: 100}, &page); err != nil {
			return d, err
		}
		for _, entry := range page {
			if !strings.HasPrefix(entry.Key, month+"-") {
				return d, loadRest(ctx, properties, p, companyID, &d)
			}
			d.Month = append(d.Month, entry.Doc)
			d.Total += entry.Doc.Amount
			after = entry.Key
		}
		if len(page) < 100 {
			return d, loadRest(ctx, properties, p, companyID, &d)
		}
	}
}

func loadRest(ctx context.Context, properties *hoarddb.Bucket, p *hoarddb.Document, companyID string, d *Dashboard) error {
	if _, err := p.Field("Tickets").Peek(ctx, &d.TopTicket); err != nil {
		return err
	}
	var docs []struct {
		ID string `bson:"_id_"`
	}
	found, err := properties.Search(ctx, bson.M{"CompanyID": companyID}, &docs)
	if err != nil {
		return err
	}
	for _, doc := range docs {
		d.Properties = append(d.Properties, doc.ID)
	}
	d.IndexUsed = found.IndexUsed
	return nil
}

// --- example: end

func TestCaseStudy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := hoarddb.Connect(ctx, os.Getenv("HOARDDB_TEST_URL"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	db := client.Database("propertysage")
	_, _ = db.DropBucket(ctx, "Property")
	properties, err := CreateProperty(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []bson.M{{"_id_": "p1", "CompanyID": "c1", "Name": "Elm St"},
		{"_id_": "p2", "CompanyID": "c1", "Name": "Oak Ave"}, {"_id_": "p3", "CompanyID": "c2", "Name": "Pine Rd"}} {
		if _, err := properties.Insert(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	p1 := properties.Doc("p1")
	for _, e := range []Expense{{"e1", 120, "boiler", "2026-03-14"}, {"e2", 40, "cleaning", "2026-02-27"},
		{"e3", 75, "garden", "2026-03-02"}, {"e4", 300, "roof", "2026-04-01"}} {
		if err := RecordExpense(ctx, p1, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := CorrectExpense(ctx, p1, Expense{"e1", 95, "boiler", "2026-03-14"}); err != nil {
		t.Fatal(err)
	}
	if err := p1.Field("Tickets").Push(ctx, bson.M{"priority": 1, "Subject": "Squeaky door"}); err != nil {
		t.Fatal(err)
	}
	if err := p1.Field("Tickets").Push(ctx, bson.M{"priority": 3, "Subject": "Boiler"}); err != nil {
		t.Fatal(err)
	}
	d, err := LoadDashboard(ctx, properties, "c1", "p1", "2026-03")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Latest) != 5 || d.Latest[0] != (Expense{"e1", 95, "boiler", "2026-03-14"}) || d.Latest[4].ID != "e1" {
		t.Errorf("the feed, newest first, with the correction on top: %+v", d.Latest)
	}
	if len(d.Month) != 2 || d.Month[0].ID != "e3" || d.Month[1].ID != "e1" || d.Total != 75+95 {
		t.Errorf("March in date order, corrected: %+v total %d", d.Month, d.Total)
	}
	if d.TopTicket["Subject"] != "Boiler" {
		t.Errorf("the heap's highest priority first: %v", d.TopTicket)
	}
	if strings.Join(d.Properties, ",") != "p1,p2" && strings.Join(d.Properties, ",") != "p2,p1" || d.IndexUsed == "none — full scan" {
		t.Errorf("the company's properties by its index: %v %q", d.Properties, d.IndexUsed)
	}
	var record Expense
	if ok, err := p1.Field("ExpenseByID").Get(ctx, "e1", &record); err != nil || !ok || record.Amount != 95 {
		t.Errorf("the record by id: %+v %v", record, err)
	}
	// reads left every store as it was
	if n, _ := p1.Field("Expenses").Length(ctx); n != 5 {
		t.Errorf("the dashboard removed feed elements: %d left", n)
	}
	// the document carries the declaration, not the data
	var doc bson.M
	if ok, _ := properties.Get(ctx, "p1", &doc); !ok || doc["Expenses"] != nil {
		t.Errorf("get returns the document's own fields only: %v", doc)
	}
}

func TestDocsShowTheExample(t *testing.T) {
	source, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	text := string(source)
	begin := strings.Index(text, "// --- example: begin\n") + len("// --- example: begin\n")
	end := strings.Index(text, "// --- example: end")
	example := strings.TrimSpace(text[begin:end])
	page, err := os.ReadFile("../../docs/user/go.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), example) {
		t.Errorf("docs/user/go.md must show example_test.go's example (between its begin and end marks) as it is")
	}
}
