package classify

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUploadPackCaps is issue 12 item 2: free text inside download-only
// git. Each body was accepted before.
func TestUploadPackCaps(t *testing.T) {
	oid := strings.Repeat("ab", 20)
	blob := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xfe, 0xed}, 450))
	var prefix []string
	for range 1000 {
		prefix = append(prefix, "ref-prefix "+blob[:900])
	}
	var haves []string
	for i := range 20000 {
		haves = append(haves, fmt.Sprintf("have %040x", i))
	}
	var shortPrefix []string
	for range 40 {
		shortPrefix = append(shortPrefix, "ref-prefix refs/heads/x")
	}
	cases := []struct {
		name string
		body []byte
		ok   bool
	}{
		{"1000 ref-prefix lines of base64", pkt(append([]string{"command=ls-refs", "0001"}, append(prefix, "0000")...)...), false},
		{"one 900-byte ref-prefix", pkt("command=ls-refs", "0001", "ref-prefix "+blob[:900], "0000"), false},
		{"40 ref-prefix lines", pkt(append([]string{"command=ls-refs", "0001"}, append(shortPrefix, "0000")...)...), false},
		{"ref-prefix with spaces", pkt("command=ls-refs", "0001", "ref-prefix hello world", "0000"), false},
		{"20000 have lines", pkt(append([]string{"want " + oid}, append(haves, "0000")...)...), false},
		{"agent free text", pkt("command=fetch", "agent="+blob[:200], "0001", "want "+oid, "done", "0000"), false},
		{"server-option", pkt("command=fetch", "server-option=exfil", "0001", "want "+oid, "done", "0000"), false},
		{"two commands", pkt("command=fetch", "command=fetch", "0001", "want "+oid, "done", "0000"), false},
		{"unknown v0 capability", pkt("want "+oid+" multi_ack exfil-data", "0000", "done"), false},
		{"filter free text", pkt("command=fetch", "0001", "want "+oid, "filter blob:none:"+blob[:40], "done", "0000"), false},
		{"v2 fetch", pkt("command=fetch", "agent=git/2.39.5", "object-format=sha1", "0001", "thin-pack", "ofs-delta", "want "+oid, "have "+oid, "filter blob:limit=1m", "done", "0000"), true},
		{"v2 ls-refs", pkt("command=ls-refs", "agent=git/2.39.5", "0001", "peel", "symrefs", "unborn", "ref-prefix HEAD", "ref-prefix refs/heads/", "ref-prefix refs/tags/", "0000"), true},
		// Capabilities ride on the first v0 want only, each once: on every
		// want line, agent= values made the whole body free text.
		{"caps on every want", pkt("want "+oid+" agent=git/"+blob[:60], "want "+oid+" agent=git/"+blob[60:120], "want "+oid+" agent=git/"+blob[120:180], "0000", "done"), false},
		{"one agent cap repeated", pkt("want "+oid+" agent=a"+blob[:60]+" agent=b"+blob[60:120]+" session-id="+blob[120:180]+" session-id="+blob[180:240], "0000", "done"), false},
		{"two wants, caps on the first", pkt("want "+oid+" ofs-delta agent=git/2.39.5", "want "+oid, "0000", "done"), true},
		{"v0 want with caps", pkt("want "+oid+" multi_ack_detailed no-done side-band-64k thin-pack ofs-delta deepen-since deepen-not agent=git/2.39.5", "0000", "have "+oid, "done"), true},
	}
	for _, c := range cases {
		if ok, why := checkUploadPackBody(c.body); ok != c.ok {
			t.Errorf("%s: ok=%v (%s), want %v", c.name, ok, why, c.ok)
		}
	}
}

func TestLFSBatchCaps(t *testing.T) {
	oid := strings.Repeat("a", 64)
	obj := `{"oid":"` + oid + `","size":12}`
	many := strings.TrimSuffix(strings.Repeat(obj+",", 300), ",")
	cases := []struct {
		name, body string
		ok         bool
	}{
		{"60 KB ref name", `{"operation":"download","ref":{"name":"refs/heads/` + strings.Repeat("A", 60000) + `"},"objects":[` + obj + `]}`, false},
		{"ref name with spaces", `{"operation":"download","ref":{"name":"refs/heads/a b"},"objects":[` + obj + `]}`, false},
		{"300 objects", `{"operation":"download","objects":[` + many + `]}`, false},
		{"free-text transfer", `{"operation":"download","transfers":["` + strings.Repeat("x", 100) + `"],"objects":[` + obj + `]}`, false},
		{"extra object key", `{"operation":"download","objects":[{"oid":"` + oid + `","size":1,"note":"x"}]}`, false},
		{"huge size digits", `{"operation":"download","objects":[{"oid":"` + oid + `","size":123456789012345678901234567890}]}`, false},
		{"hash_algo other", `{"operation":"download","hash_algo":"exfil","objects":[` + obj + `]}`, false},
		{"real download", `{"operation":"download","transfers":["lfs-standalone-file","basic","ssh"],"ref":{"name":"refs/heads/main"},"objects":[` + obj + `],"hash_algo":"sha256"}`, true},
	}
	for _, c := range cases {
		if ok, why := checkLFSBatch([]byte(c.body)); ok != c.ok {
			t.Errorf("%s: ok=%v (%s), want %v", c.name, ok, why, c.ok)
		}
	}
}

// TestRealGitBodies replays upload-pack bodies captured from git 2.39.5
// (clone, shallow clone, partial clone, fetch with 2,000 diverged local
// commits, fetch --tags; protocol v0 and v2): the caps must pass them.
func TestRealGitBodies(t *testing.T) {
	files, _ := filepath.Glob("testdata/git-bodies/*.pkt")
	if len(files) < 5 {
		t.Fatalf("only %d captured bodies in testdata/git-bodies", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if ok, why := checkUploadPackBody(b); !ok {
			t.Errorf("%s: refused: %s", filepath.Base(f), why)
		}
	}
}

// FuzzUploadPackBody: whatever the parser accepts, no line kind carries more
// than its cap, counted by an independent reading of the pkt-lines.
func FuzzUploadPackBody(f *testing.F) {
	oid := strings.Repeat("ab", 20)
	f.Add(pkt("command=fetch", "agent=git/2.39.5", "0001", "want "+oid, "have "+oid, "done", "0000"))
	f.Add(pkt("command=ls-refs", "0001", "ref-prefix refs/heads/", "0000"))
	f.Add(pkt("want "+oid+" multi_ack side-band-64k agent=git/2", "0000", "have "+oid, "done"))
	f.Fuzz(func(t *testing.T, body []byte) {
		ok, _ := checkUploadPackBody(body)
		if !ok || len(body) >= 2 && body[0] == 0x1f {
			return
		}
		counts := map[string]int{}
		for b := body; len(b) >= 4; {
			var n int
			fmt.Sscanf(string(b[:4]), "%04x", &n)
			if n <= 2 {
				b = b[4:]
				continue
			}
			line := strings.TrimSuffix(string(b[4:n]), "\n")
			b = b[n:]
			kind, _, _ := strings.Cut(line, " ")
			if k, _, eq := strings.Cut(kind, "="); eq {
				kind = k + "="
			}
			c, known := uploadPackCaps[kind]
			if !known {
				t.Fatalf("accepted a line of unknown kind %q", kind)
			}
			counts[kind]++
			if counts[kind] > c.count || len(line) > c.size {
				t.Fatalf("accepted %d %q lines (cap %d), line of %d bytes (cap %d)", counts[kind], kind, c.count, len(line), c.size)
			}
			if kind == "ref-prefix" || kind == "want-ref" || kind == "deepen-not" {
				if strings.ContainsAny(line[len(kind)+1:], " \t\x00~^:?*[\\") {
					t.Fatalf("accepted ref %q", line)
				}
			}
		}
	})
}

// FuzzLFSBatch: whatever the parser accepts decodes as a download batch
// within the caps.
func FuzzLFSBatch(f *testing.F) {
	oid := strings.Repeat("a", 64)
	f.Add([]byte(`{"operation":"download","transfers":["basic"],"ref":{"name":"refs/heads/main"},"objects":[{"oid":"` + oid + `","size":1}]}`))
	f.Add([]byte(`{"operation":"upload","objects":[]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if ok, _ := checkLFSBatch(body); !ok {
			return
		}
		var v struct {
			Operation string   `json:"operation"`
			Transfers []string `json:"transfers"`
			Ref       *struct {
				Name string `json:"name"`
			} `json:"ref"`
			Objects []struct {
				OID  string          `json:"oid"`
				Size json.RawMessage `json:"size"`
			} `json:"objects"`
			HashAlgo string `json:"hash_algo"`
		}
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("accepted a body encoding/json refuses: %v", err)
		}
		if v.Operation != "download" || len(v.Objects) > lfsMaxObjects || len(v.Transfers) > lfsMaxTransfers {
			t.Fatalf("accepted %q with %d objects, %d transfers", v.Operation, len(v.Objects), len(v.Transfers))
		}
		if v.Ref != nil && len(v.Ref.Name) > maxRefName {
			t.Fatalf("accepted a ref name of %d bytes", len(v.Ref.Name))
		}
		for _, o := range v.Objects {
			if len(o.OID) != 64 || len(o.Size) > 16 {
				t.Fatalf("accepted object %q size %s", o.OID, o.Size)
			}
		}
		for _, tr := range v.Transfers {
			if len(tr) > 32 {
				t.Fatalf("accepted transfer of %d bytes", len(tr))
			}
		}
		// what is forwarded passes the same check
		fwd, _, err := CheckedBody(lfsType, body)
		if err != nil {
			t.Fatalf("accepted body cannot be forwarded: %v", err)
		}
		if ok, why := checkLFSBatch(fwd); !ok {
			t.Fatalf("forwarded spelling %q of accepted %q fails the check: %s", fwd, body, why)
		}
	})
}

// TestCheckedBodyCanonical: what is forwarded is what was checked, in one
// spelling. A JSON body's whitespace between tokens and \u escapes inside
// strings are choices the checks never see: an LFS batch of 64 KiB carried
// about 16 KiB in its whitespace alone. A gzip body is forwarded inflated.
func TestCheckedBodyCanonical(t *testing.T) {
	oid := strings.Repeat("a", 64)
	ws := strings.Repeat(" \t\r\n", 200)
	lfs := `{` + ws + `"operation"` + ws + `:"\u0064ownload","objects":[{"oid":"\u0061` + oid[1:] + `","size":` + ws + `12}]}`
	if ok, why := checkLFSBatch([]byte(lfs)); !ok {
		t.Fatalf("test body refused: %s", why)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Comment = "exfil"
	io.WriteString(zw, "0014command=ls-refs\n0000")
	zw.Close()
	cases := []struct {
		name, ctype string
		body        []byte
		want        string
		gzipped     bool
	}{
		{"lfs batch", lfsType, []byte(lfs), `{"objects":[{"oid":"` + oid + `","size":12}],"operation":"download"}`, false},
		{"jira search", "Application/JSON; charset=utf-8", []byte(`{ "jql" : "project = \u0041" , "startAt" : 0 }`), `{"jql":"project = A","startAt":0}`, false},
		{"gzip upload-pack", uploadPackType, gz.Bytes(), "0014command=ls-refs\n0000", true},
		{"plain upload-pack", uploadPackType, []byte("0014command=ls-refs\n0000"), "0014command=ls-refs\n0000", false},
	}
	for _, c := range cases {
		got, gzipped, err := CheckedBody(c.ctype, c.body)
		if err != nil || string(got) != c.want || gzipped != c.gzipped {
			t.Errorf("%s: CheckedBody = %q, gzipped %v, %v; want %q, gzipped %v", c.name, got, gzipped, err, c.want, c.gzipped)
		}
	}
}
