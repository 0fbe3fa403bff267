package proxy

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/egressd/egressd/honeytoken"
)

// TestInspectedStreamNeverSplices: a WebSocket whose frames are scanned
// for honeytokens (wsScanConn over a plain TCP socket, the ws:// case) is
// relayed through the scanner even in a streaming burst: a token placed
// after the first 256 KiB of one message is seen, the relay stops before
// the destination gets it, and no byte of it was spliced past the scan.
func TestInspectedStreamNeverSplices(t *testing.T) {
	ts, _ := honeytoken.Issue("splice-agent")
	reg := honeytoken.NewRegistry()
	reg.Set("t", ts)
	srcW, srcR := tcpPair(t)
	dstW, dstR := tcpPair(t)
	hits := make(chan honeytoken.Token, 1)
	scan := &wsScanConn{Conn: srcR, s: &wsScanner{reg: reg},
		hit:    func(tk honeytoken.Token) { hits <- tk; srcR.Close() },
		refuse: func(err error) { t.Errorf("frame refused: %v", err) }}
	payload := append(bytes.Repeat([]byte("a"), 256<<10), []byte(" exfil "+ts[1].Value)...)
	frame := wsFrame(2, true, payload, [4]byte{1, 2, 3, 4})
	go func() {
		srcW.Write(frame) //nolint:errcheck // the relay stops reading at the token
		srcW.CloseWrite()
	}()
	before := relaySplicedBytes.Load()
	done := make(chan error, 1)
	go func() {
		_, err := relay(dstW, scan, nil)
		dstW.CloseWrite()
		done <- err
	}()
	got, _ := io.ReadAll(dstR)
	if err := <-done; !errors.Is(err, errHoneytokenFrame) {
		t.Fatalf("relay of a scanned stream carrying a token: %v, want the honeytoken refusal", err)
	}
	select {
	case <-hits:
	default:
		t.Fatal("the scanner saw no token")
	}
	if len(got) >= len(frame) {
		t.Errorf("the destination got all %d bytes of the frame with the token", len(got))
	}
	if n := relaySplicedBytes.Load() - before; n != 0 {
		t.Errorf("%d bytes of a scanned stream spliced past the scanner", n)
	}
}
