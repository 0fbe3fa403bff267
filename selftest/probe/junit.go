package probe

import (
	"encoding/xml"
	"fmt"
	"io"

	"github.com/egressd/egressd/selftest"
)

type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     float64     `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	ClassName string        `xml:"classname,attr"`
	Time      float64       `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Error     *junitMessage `xml:"error,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// WriteJUnit writes rep as a JUnit XML suite (one test case per probe): a
// leak or a failed positive control is a failure, a probe that could not
// tell an error, one not run or untestable live skipped. CI systems read it as test results.
func WriteJUnit(w io.Writer, identity string, rep *selftest.Report) error {
	s := junitSuite{Name: "egressd probe " + identity, Time: rep.Duration.Seconds()}
	for _, r := range rep.Results {
		c := junitCase{Name: r.ID, ClassName: "egressd." + r.Route, Time: r.Duration.Seconds()}
		msg := &junitMessage{Message: fmt.Sprintf("%s: %s", r.Status, r.Result), Text: fmt.Sprintf("target %s, expected %s: %s", r.Target, r.Expected, r.Detail)}
		switch r.Status {
		case selftest.Leak, selftest.Failed:
			c.Failure = msg
			s.Failures++
		case selftest.Error:
			c.Error = msg
			s.Errors++
		case selftest.NotRun, selftest.Untestable:
			c.Skipped = msg
			s.Skipped++
		}
		s.Cases = append(s.Cases, c)
	}
	s.Tests = len(s.Cases)
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(junitSuites{Suites: []junitSuite{s}}); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
