package testutil

import (
	"os"
	"testing"
)

// Golden compares got with the golden file at path, or rewrites the file
// when update is set (each package's -update flag): a change to a format
// users parse is then a reviewed diff of testdata/, never a silent one.
func Golden(t testing.TB, path, got string, update bool) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from what the code writes now (rerun with -update if the change is meant):\n--- got\n%s--- want\n%s", path, got, want)
	}
}
