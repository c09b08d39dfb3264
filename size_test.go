package heapscope

import (
	"encoding/json"
	"testing"
)

// TestSizeText: a Size writes the largest binary unit that divides it,
// parses back what it wrote, and is a number of bytes in JSON (which also
// reads the text form).
func TestSizeText(t *testing.T) {
	for s, text := range map[Size]string{0: "0", 1000: "1000B", 64 * KiB: "64KiB", 3 * MiB / 2: "1536KiB", 4 * GiB: "4GiB", TiB: "1TiB"} {
		if s.String() != text {
			t.Errorf("%d writes %q, want %q", int64(s), s.String(), text)
		}
		var back Size
		if err := back.UnmarshalText([]byte(text)); err != nil || back != s {
			t.Errorf("%q reads %d, %v; want %d", text, back, err, int64(s))
		}
	}
	var v struct{ S Size }
	if b, _ := json.Marshal(struct{ S Size }{64 * KiB}); string(b) != `{"S":65536}` {
		t.Errorf("JSON %s", b)
	}
	if err := json.Unmarshal([]byte(`{"S":"1MiB"}`), &v); err != nil || v.S != MiB {
		t.Errorf("JSON \"1MiB\": %d, %v", v.S, err)
	}
	if err := json.Unmarshal([]byte(`{"S":"lots"}`), &v); err == nil {
		t.Errorf("JSON \"lots\" read as %d", v.S)
	}
}
