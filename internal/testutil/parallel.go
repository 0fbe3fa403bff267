package testutil

import (
	"flag"
	"runtime"
	"strconv"
)

// WaitingParallel raises the number of parallel tests of a package whose
// tests mostly wait (on child processes, namespaces, probe timeouts) from
// go test's default, GOMAXPROCS (2 on a 2-core machine), to n, unless
// -parallel was given on the command line. Call it from TestMain before
// m.Run; it parses the flags.
func WaitingParallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if given || n <= runtime.GOMAXPROCS(0) {
		return
	}
	if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
		panic("testutil.WaitingParallel: " + err.Error()) // the testing package renamed its flag
	}
}
