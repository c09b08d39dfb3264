package report

import (
	"encoding/xml"
	"io"
	"strconv"
	"time"
)

// JUnit XML, as CI systems read it (Jenkins, GitLab, GitHub's test
// reporters): one suite, one test case per condition of a gate, a failure
// holding its summary (the message) and its top sites (the text).

type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Tests   int          `xml:"tests,attr"`
	Failed  int          `xml:"failures,attr"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name      string      `xml:"name,attr"`
	Tests     int         `xml:"tests,attr"`
	Failures  int         `xml:"failures,attr"`
	Errors    int         `xml:"errors,attr"`
	Time      string      `xml:"time,attr"`
	Timestamp string      `xml:"timestamp,attr,omitempty"`
	Cases     []junitCase `xml:"testcase"`
	SystemOut string      `xml:"system-out,omitempty"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitFailure `xml:"failure"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// WriteJUnit writes checks as a JUnit XML file: a suite named suite (the
// program, say), whose test cases are named heapscope.CONDITION, with
// elapsed as the suite's time and out (the verdict line, the program's
// status) as its system-out.
func WriteJUnit(w io.Writer, suite string, checks []Check, elapsed time.Duration, started time.Time, out string) error {
	s := junitSuite{Name: suite, Tests: len(checks), Time: secs(elapsed), SystemOut: out}
	if !started.IsZero() {
		s.Timestamp = started.UTC().Format("2006-01-02T15:04:05")
	}
	for _, c := range checks {
		jc := junitCase{Name: c.Name, Classname: "heapscope." + suite, Time: "0", SystemOut: c.Summary}
		if c.Failed {
			s.Failures++
			jc.Failure = &junitFailure{Message: c.Summary, Type: "heapscope." + c.Name, Text: c.Detail}
		}
		s.Cases = append(s.Cases, jc)
	}
	doc := junitSuites{Tests: s.Tests, Failed: s.Failures, Suites: []junitSuite{s}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	e := xml.NewEncoder(w)
	e.Indent("", "  ")
	if err := e.Encode(doc); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) }
