package testutil

import (
	"encoding/xml"
	"testing"
)

// JUnit is what a CI system reads of a JUnit file (report.WriteJUnit's).
type JUnit struct {
	Tests    int `xml:"tests,attr"`
	Failures int `xml:"failures,attr"`
	Suites   []struct {
		Name  string `xml:"name,attr"`
		Cases []struct {
			Name    string `xml:"name,attr"`
			Failure *struct {
				Message string `xml:"message,attr"`
				Text    string `xml:",chardata"`
			} `xml:"failure"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// ParseJUnit parses the JUnit document b, failing the test with it if it
// cannot.
func ParseJUnit(tb testing.TB, b []byte) JUnit {
	tb.Helper()
	var d JUnit
	if err := xml.Unmarshal(b, &d); err != nil {
		tb.Fatalf("%v:\n%s", err, b)
	}
	return d
}
