package collector

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// TestMessages: whole lines only, and two messages run together on one
// line (a collector killed between a message and its newline, then
// appending) are an error, not the first message alone.
func TestMessages(t *testing.T) {
	p := pprofile.NewProfiles()
	p.ResourceProfiles().AppendEmpty().Resource().Attributes().PutInt("process.pid", 7)
	// pdata's marshalers rewrite attribute keys as dictionary references
	// in place, unless the profiles are read-only.
	p.MarkReadOnly()
	b, err := (&pprofile.JSONMarshaler{}).MarshalProfiles(p)
	if err != nil {
		t.Fatal(err)
	}
	c := &Collector{Out: filepath.Join(t.TempDir(), "out.json")}
	for _, tc := range []struct {
		file string
		n    int
		bad  bool
	}{
		{"", 0, false},
		{string(b), 0, false}, // no newline yet
		{string(b) + "\n", 1, false},
		{string(b) + "\n" + string(b), 1, false},
		{string(b) + "\n\n" + string(b) + "\n", 2, false},
		{string(b) + string(b) + "\n", 0, true},
		{string(b) + "\n" + strings.Repeat("x", 10) + "\n", 1, true},
	} {
		if err := os.WriteFile(c.Out, []byte(tc.file), 0o600); err != nil {
			t.Fatal(err)
		}
		ms, err := c.Messages()
		if len(ms) != tc.n || (err != nil) != tc.bad {
			t.Errorf("%q: %d messages, %v; want %d, error %v", tc.file, len(ms), err, tc.n, tc.bad)
		}
	}
	tot, err := Totals(p)
	if err != nil || len(tot) != 1 || tot[7] == nil {
		t.Errorf("Totals = %v, %v", tot, err)
	}
}
