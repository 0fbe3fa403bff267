package policy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// at holds a scalar from the config file with the line it came from, so that
// validation after decoding can still name file and line. It is only used on
// leaves: a custom unmarshaller on a mapping would lose KnownFields (go-yaml
// #460).
type at[T any] struct {
	V    T
	Line int
}

func (a *at[T]) UnmarshalYAML(n *yaml.Node) error {
	a.Line = n.Line
	// A string scalar into a string is its value (what n.Decode does): a
	// million-host list skips a million decoders (each with a map).
	if s, ok := any(&a.V).(*string); ok && n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		*s = n.Value
		return nil
	}
	return n.Decode(&a.V)
}

// The raw schema, version 1. Field names are the config keys in README.md's config reference.
type rawConfig struct {
	Version    *at[int]      `yaml:"version"`
	Listen     rawListen     `yaml:"listen"`
	Resolver   rawResolver   `yaml:"resolver"`
	UpstreamCA at[string]    `yaml:"upstream_ca"`
	Allow      []rawRule     `yaml:"allow"`
	Deny       rawDeny       `yaml:"deny"`
	Identities []rawIdentity `yaml:"identities"`
	Sandbox    rawSandbox    `yaml:"sandbox"`
	Selftest   rawSelftest   `yaml:"selftest"`
	Limits     rawLimits     `yaml:"limits"`
	Alerts     rawAlerts     `yaml:"alerts"`
	Audit      rawAudit      `yaml:"audit"`
	// Honeytokens places canary credentials in sandboxes egressd runs.
	Honeytokens at[bool] `yaml:"honeytokens"`
	Tools       rawTools `yaml:"tools"` // tools.go

	UpstreamProxy *rawUpstreamProxy `yaml:"upstream_proxy"` // rules.go
}

type rawAlerts struct {
	Webhook at[string] `yaml:"webhook"`
	Batch   at[string] `yaml:"batch"`
}

type rawAudit struct {
	OnError            at[string] `yaml:"on_error"`
	SignKey            at[string] `yaml:"sign_key"`
	SignKeyPrevious    at[string] `yaml:"sign_key_previous"`
	CheckpointRecords  at[int]    `yaml:"checkpoint_records"`
	CheckpointInterval at[string] `yaml:"checkpoint_interval"`
}

type rawListen struct {
	Proxy           at[string] `yaml:"proxy"`
	DNS             at[string] `yaml:"dns"`
	Admin           at[string] `yaml:"admin"`
	Transparent     at[string] `yaml:"transparent"`
	TransparentHTTP at[string] `yaml:"transparent_http"`
}

type rawResolver struct {
	Upstreams []at[string] `yaml:"upstreams"`
}

type rawRule struct {
	Name           at[string]   `yaml:"name"`
	Hosts          []at[string] `yaml:"hosts"`
	HostsFiles     []at[string] `yaml:"hosts_files"`
	Ports          []at[string] `yaml:"ports"`
	CIDRs          []at[string] `yaml:"cidrs"`
	Pages          []at[string] `yaml:"pages"`
	Methods        []at[string] `yaml:"methods"`
	Paths          []at[string] `yaml:"paths"`
	Mirror         at[string]   `yaml:"mirror"`
	ModulePrefixes []at[string] `yaml:"module_prefixes"`
	BasePath       at[string]   `yaml:"base_path"`
	ReadPosts      []at[string] `yaml:"read_posts"`
	TLS            *at[bool]    `yaml:"tls"`
	Upgrade        []at[string] `yaml:"upgrade"`

	// per-identity rules, deny messages and credential injection (rules.go)
	Identities []at[string] `yaml:"identities"`
	Message    at[string]   `yaml:"message"`
	Inject     *rawInject   `yaml:"inject"`
}

type rawDeny struct {
	Hosts      []at[string] `yaml:"hosts"`
	CIDRs      []at[string] `yaml:"cidrs"`
	HostsFiles []at[string] `yaml:"hosts_files"`
	Message    at[string]   `yaml:"message"`
}

type rawIdentity struct {
	Name  at[string]   `yaml:"name"`
	CIDRs []at[string] `yaml:"cidrs"`
	User  at[string]   `yaml:"user"`
	// TokenSHA256 is the hex SHA-256 of the Proxy-Authorization password
	// that proves the user: a label alone is not a secret.
	TokenSHA256 at[string] `yaml:"token_sha256"`
	Evaluation  *at[bool]  `yaml:"evaluation"`
}

type rawSandbox struct {
	InterfacePrefix at[string]   `yaml:"interface_prefix"`
	Pool4           at[string]   `yaml:"pool4"`
	Pool6           at[string]   `yaml:"pool6"`
	UIDs            []at[uint32] `yaml:"uids"`
	CIDRs           []at[string] `yaml:"cidrs"`
}

type rawSelftest struct {
	Interval        at[string]   `yaml:"interval"`
	Timeout         at[string]   `yaml:"timeout"`
	TCP             []at[string] `yaml:"tcp"`
	UDP             []at[string] `yaml:"udp"`
	IPv6            []at[string] `yaml:"ipv6"`
	Resolvers       []at[string] `yaml:"resolvers"`
	CanaryName      at[string]   `yaml:"canary_name"`
	CanaryURL       at[string]   `yaml:"canary_url"`
	CanaryLog       at[string]   `yaml:"canary_log"`
	Metadata        []at[string] `yaml:"metadata"`
	ExpectReachable []at[string] `yaml:"expect_reachable"`
	Webhook         at[string]   `yaml:"webhook"`
	// in-sandbox probes: the longest schedule a sandbox may claim, and
	// whether a leak it reports quarantines its identity
	ProbeEveryMax         at[string]      `yaml:"probe_every_max"`
	QuarantineOnProbeLeak at[bool]        `yaml:"quarantine_on_probe_leak"`
	ToolServers           []rawToolServer `yaml:"tool_servers"` // tools.go
}

type rawLimits struct {
	ConnsPerIdentity at[int]    `yaml:"conns_per_identity"`
	ClientConns      at[int]    `yaml:"client_conns_per_identity"`
	HeaderBytes      at[int]    `yaml:"header_bytes"`
	IdleTimeout      at[string] `yaml:"idle_timeout"`
	DialTimeout      at[string] `yaml:"dial_timeout"`
	MirrorBodyBytes  at[int64]  `yaml:"mirror_body_bytes"`
	DNSQueriesPerSec at[int]    `yaml:"dns_queries_per_second"`
	ReadHeadBytes    at[int]    `yaml:"read_head_bytes"`
	QueryBytes       at[int]    `yaml:"query_bytes"`
	DNSWildcardNames at[int]    `yaml:"dns_wildcard_names"`
	DNSExactOnly     at[bool]   `yaml:"dns_exact_only"`

	RequestHeaderTimeout  at[string] `yaml:"request_header_timeout"`
	ResponseHeaderTimeout at[string] `yaml:"response_header_timeout"`
	ResponseHeaderBytes   at[int]    `yaml:"response_header_bytes"`
	ResponseIdleTimeout   at[string] `yaml:"response_idle_timeout"`
	ResponseTimeout       at[string] `yaml:"response_timeout"`

	ShutdownGrace at[string] `yaml:"shutdown_grace"`
}

// ConfigError is one problem in a config file, located by file, line and
// field path ("allow[3].hosts[0]").
type ConfigError struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// ConfigErrors is every problem found in one file, in file order.
type ConfigErrors []*ConfigError

func (es ConfigErrors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Load reads and compiles the config file at path. A regular file is
// decoded as it is read, not held whole beside the parser's nodes (a
// million hosts inline are 35 MB of text); only a config with errors is
// read again, to name the fields they are in.
func Load(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open config: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return Parse(f, path) // a pipe cannot be read again for the error
	}
	if st.Size() > maxConfigBytes {
		return nil, tooLarge(path)
	}
	if st.Size() >= cutMinBytes { // long inline host lists: see hostruns.go
		buf := bytes.NewBuffer(make([]byte, 0, st.Size()+bytes.MinRead))
		if _, err := buf.ReadFrom(io.LimitReader(f, maxConfigBytes+1)); err != nil {
			return nil, fmt.Errorf("read config %s: %w", path, err)
		}
		if buf.Len() > maxConfigBytes {
			return nil, tooLarge(path)
		}
		if raw, err := decodeCut(buf.Bytes(), minHostRun); err == nil {
			return compileRaw(raw, &compiler{file: path})
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, fmt.Errorf("read config %s: %w", path, err)
		}
	}
	lr := &io.LimitedReader{R: f, N: maxConfigBytes + 1}
	p, err := parse(bufio.NewReaderSize(lr, 64<<10), path, func() []byte {
		b, _ := os.ReadFile(path)
		return b
	})
	if lr.N <= 0 { // a pipe or a file that grew while it was read
		return nil, tooLarge(path)
	}
	return p, err
}

// maxConfigBytes bounds what Parse reads: a million-host policy is ~30 MB.
const maxConfigBytes = 256 << 20

func tooLarge(name string) error {
	return ConfigErrors{{File: name, Msg: fmt.Sprintf("config larger than %d bytes", maxConfigBytes)}}
}

// Parse decodes a version-1 config strictly (unknown keys, a missing version
// and trailing documents are errors) and compiles it into an immutable
// Policy. name is used in error messages. Errors are ConfigErrors.
func Parse(r io.Reader, name string) (*Policy, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read config %s: %w", name, err)
	}
	if len(data) > maxConfigBytes {
		return nil, tooLarge(name)
	}
	if raw, err := decodeCut(data, minHostRun); err == nil {
		return compileRaw(raw, &compiler{file: name})
	}
	return parse(bytes.NewReader(data), name, func() []byte { return data })
}

// cutMinBytes: a config this small holds no host list worth cutting.
const cutMinBytes = 64 << 10

// parse decodes the config r holds; text returns the whole of it again,
// only for an error message.
func parse(r io.Reader, name string, text func() []byte) (*Policy, error) {
	var raw rawConfig
	dec := yaml.NewDecoder(r)
	dec.KnownFields(true)
	c := compiler{file: name}
	if err := dec.Decode(&raw); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, ConfigErrors{{File: name, Field: "version", Msg: "empty config: version: 1 is required"}}
		}
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, yamlErrors(name, text(), err)
		}
		// A type error still decodes the rest: report it and keep checking,
		// so one run shows every problem.
		c.errs = yamlErrors(name, text(), err)
	} else {
		var extra yaml.Node
		if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
			return nil, ConfigErrors{{File: name, Line: extra.Line, Msg: "more than one YAML document: a config is one document"}}
		}
	}
	return compileRaw(&raw, &c)
}

// compileRaw compiles a decoded config; errors (c's and the compiler's)
// come sorted by line.
func compileRaw(raw *rawConfig, c *compiler) (*Policy, error) {
	p := c.compile(raw)
	if len(c.errs) > 0 {
		slices.SortStableFunc(c.errs, func(a, b *ConfigError) int { return a.Line - b.Line })
		return nil, c.errs
	}
	return p, nil
}

// yamlLineRE reads the line out of yaml.v3's message for what has no node
// to point at: a syntax error, or a refusal the walk does not know.
var yamlLineRE = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// yamlErrors turns a config yaml.v3 refused into file:line errors with the
// field path (with rule indexes), a suggestion for a mistyped key, and the
// shape a mistyped value should have, found on the document's nodes
// (nodeErrors in configerr.go). Errors that are not about a node's key or
// shape (a syntax error, excessive aliasing), and any the walk does not
// find, keep yaml.v3's own words, with their lines.
func yamlErrors(file string, data []byte, err error) ConfigErrors {
	msgs := []string{err.Error()}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		var doc yaml.Node
		if yaml.Unmarshal(data, &doc) == nil {
			if errs := nodeErrors(file, &doc, reflect.TypeFor[rawConfig]()); len(errs) > 0 {
				return errs
			}
		}
		msgs = te.Errors
	}
	var out ConfigErrors
	for _, m := range msgs {
		e := &ConfigError{File: file, Msg: strings.TrimPrefix(m, "yaml: ")}
		if sm := yamlLineRE.FindStringSubmatch(m); sm != nil {
			fmt.Sscan(sm[1], &e.Line)
			e.Msg = sm[2]
		}
		out = append(out, e)
	}
	return out
}
