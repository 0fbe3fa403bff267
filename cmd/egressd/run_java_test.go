//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// javaClient is a single-file Java HTTPS client: the default HttpClient
// (default proxy selector, default trust store), GET of args[0].
const javaClient = `import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;

public class Main {
    public static void main(String[] args) throws Exception {
        HttpResponse<String> r = HttpClient.newHttpClient().send(
            HttpRequest.newBuilder(URI.create(args[0])).build(), HttpResponse.BodyHandlers.ofString());
        System.out.println("status " + r.statusCode());
    }
}
`

// TestRunJavaHTTPS: an unmodified Java 17 HttpClient inside `egressd run`
// fetches an HTTPS origin through the proxy: it trusts egressd's CA (the
// inspected tunnel's certificate) from the JKS trust store run names in
// JAVA_TOOL_OPTIONS. Before, Java had the proxy but only its own cacerts
// and failed with "PKIX path building failed".
func TestRunJavaHTTPS(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("java"); err != nil {
		t.Fatal("java (17 or later) is needed")
	}
	l := newRunLab(t, runConfig)
	src := filepath.Join(l.dir, "Main.java")
	if err := os.WriteFile(src, []byte(javaClient), 0o644); err != nil {
		t.Fatal(err)
	}
	before := l.topo.TLS.Hits()
	out, code := l.run(t, nil, "java", src, "https://allowed.test/java")
	if code != 0 || !strings.Contains(out, "status 200") || l.topo.TLS.Hits() == before {
		t.Fatalf("java through run: exit %d, origin hits %d→%d\n%s", code, before, l.topo.TLS.Hits(), out)
	}
	l.assertNothingLeft(t)
}
