package testutil

import (
	"fmt"
	"testing"
	"time"
)

func TestLogWatch(t *testing.T) {
	w := NewLogWatch()
	go func() {
		fmt.Fprintln(w, `{"msg":"starting"}`)
		fmt.Fprint(w, `{"msg":"serv`) // a line in two writes
		fmt.Fprintln(w, `ing","proxy":"x"}`)
	}()
	line, err := w.Wait(10*time.Second, nil, `"msg":"serving"`)
	if err != nil || line != `{"msg":"serving","proxy":"x"}` {
		t.Fatalf("Wait: %q %v", line, err)
	}
	// a partial line does not count
	w2 := NewLogWatch()
	fmt.Fprint(w2, `{"msg":"serving"`)
	done := make(chan struct{})
	close(done)
	if _, err := w2.Wait(10*time.Second, done, "serving"); err == nil {
		t.Fatal("a partial line matched")
	}
	if _, err := w2.Wait(time.Millisecond, nil, "never"); err == nil {
		t.Fatal("a missing line matched")
	}
}
