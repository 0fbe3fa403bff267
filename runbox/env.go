package runbox

import (
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// noProxy is the sandbox's own loopback (its servers are its own, never
// reached through the proxy) and the cloud metadata addresses: a client
// sends those straight at the wall, which drops them in silence as a
// sealed box does. Through the proxy it would get egressd's 403, an HTTP
// answer that a probe script (curl -s, no -f) cannot tell from the
// metadata service's own.
const noProxy = "localhost,127.0.0.1,::1,169.254.169.254,fd00:ec2::254,metadata.google.internal"

// cleanKeep is what --clean-env keeps: what a shell and a locale need.
var cleanKeep = []string{"PATH", "HOME", "TERM", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "USER", "LOGNAME", "SHELL", "TZ", "TMPDIR"}

// credentialName matches variable names that usually hold a secret.
var credentialName = regexp.MustCompile(`(?i)(TOKEN|SECRET|PASSW(OR)?D|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH|SESSION|COOKIE|_PAT$|^PAT_)`)

// Env is CMD's environment: the host's (or, with clean, only cleanKeep),
// plus keep, with every common client pointed at the proxy and at bundle,
// a CA file of the system roots plus egressd's CA, and Java at javaStore,
// the same certificates as a JKS trust store ("" or a path with
// whitespace, which JAVA_TOOL_OPTIONS cannot carry: none). It returns the
// credential-looking variables passed through that keep did not name.
func Env(host []string, clean bool, keep []string, proxy netip.AddrPort, bundle, javaStore string) (env, suspicious []string) {
	proxyURL := "http://" + proxy.String()
	javaTrust := ""
	if JavaOptionSafe(javaStore) {
		javaTrust = " -Djavax.net.ssl.trustStore=" + javaStore + " -Djavax.net.ssl.trustStoreType=JKS" +
			" -Djavax.net.ssl.trustStorePassword=" + TrustStorePassword
	}
	set := map[string]string{
		"HTTP_PROXY": proxyURL, "HTTPS_PROXY": proxyURL, "ALL_PROXY": proxyURL, "NO_PROXY": noProxy,
		"http_proxy": proxyURL, "https_proxy": proxyURL, "all_proxy": proxyURL, "no_proxy": noProxy,
		"NODE_USE_ENV_PROXY": "1",
		"JAVA_TOOL_OPTIONS": "-Dhttp.proxyHost=" + proxy.Addr().String() + " -Dhttp.proxyPort=" + strconv.Itoa(int(proxy.Port())) +
			" -Dhttps.proxyHost=" + proxy.Addr().String() + " -Dhttps.proxyPort=" + strconv.Itoa(int(proxy.Port())) +
			" -Dhttp.nonProxyHosts=localhost|127.0.0.1|[::1]|169.254.169.254|[fd00:ec2::254]|metadata.google.internal" + javaTrust,
	}
	for _, k := range CABundleVars {
		set[k] = bundle
	}
	set["SSL_CERT_DIR"] = CertDirFor(bundle)
	out := make([]string, 0, len(host)+len(set))
	for _, kv := range host {
		k, _, _ := strings.Cut(kv, "=")
		if _, ours := set[k]; ours {
			continue
		}
		if clean && !slices.Contains(cleanKeep, k) && !slices.Contains(keep, k) {
			continue
		}
		if credentialName.MatchString(k) && !slices.Contains(keep, k) {
			suspicious = append(suspicious, k)
		}
		out = append(out, kv)
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, k+"="+set[k])
	}
	return out, suspicious
}

// CABundleVars are the variables run points at its CA bundle (and
// SSL_CERT_DIR at CertDirFor(bundle)).
var CABundleVars = []string{
	"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "NODE_EXTRA_CA_CERTS", "npm_config_cafile",
	"CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "CARGO_HTTP_CAINFO", "AWS_CA_BUNDLE", "DENO_CERT",
	"NIX_SSL_CERT_FILE", "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", "HTTPLIB2_CA_CERTS", "CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE",
}

// JavaOptionSafe reports whether a path can be a JAVA_TOOL_OPTIONS value:
// that variable is split at whitespace and has no portable quoting.
func JavaOptionSafe(path string) bool {
	return path != "" && !strings.ContainsAny(path, " \t\n\r\"'")
}
