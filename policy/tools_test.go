package policy

import (
	"reflect"
	"strings"
	"testing"
)

const toolsIdentities = "identities:\n  - name: agent\n    cidrs: [10.9.0.0/24]\n  - name: other\n    cidrs: [10.8.0.0/24]\n"

func TestToolsConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     string
		want    Tools
		servers []ToolServer
		err     string // substring of the error, with file:line
	}{
		{name: "off by default", cfg: "version: 1\n"},
		{name: "listen", cfg: "version: 1\ntools:\n  listen: 127.0.0.1:8931\n", want: Tools{Listen: "127.0.0.1:8931"}},
		{name: "identities", cfg: "version: 1\n" + toolsIdentities + "tools:\n  listen: 127.0.0.1:8931\n  identities: [agent]\n",
			want: Tools{Listen: "127.0.0.1:8931", Identities: []string{"agent"}}},
		{name: "undeclared identity", cfg: "version: 1\n" + toolsIdentities + "tools:\n  listen: 127.0.0.1:8931\n  identities: [agnet]\n",
			err: "test.yaml:9: tools.identities[0]: \"agnet\": not a declared identity"},
		{name: "identities without listen", cfg: "version: 1\n" + toolsIdentities + "tools:\n  identities: [agent]\n",
			err: "tools.identities: set without tools.listen"},
		{name: "a name, not an address", cfg: "version: 1\ntools:\n  listen: tools.local:8931\n", err: "test.yaml:3: tools.listen: \"tools.local:8931\": listen on an address"},
		{name: "the proxy's port", cfg: "version: 1\ntools:\n  listen: 127.0.0.1:3128\n", err: "test.yaml:3: tools.listen: \"127.0.0.1:3128\": the proxy listens on that port"},
		{name: "typo", cfg: "version: 1\ntools:\n  lisen: 127.0.0.1:8931\n", err: "test.yaml:3: tools: unknown key \"lisen\": did you mean \"listen\"?"},
		{name: "tool servers with defaults", cfg: "version: 1\nselftest:\n  tool_servers:\n    - name: web\n      url: http://127.0.0.1:9000/mcp\n    - {name: other, url: \"https://tools.example/mcp\", tool: get_page, arg: address}\n",
			servers: []ToolServer{{Name: "web", URL: "http://127.0.0.1:9000/mcp", Tool: "fetch", Arg: "url"}, {Name: "other", URL: "https://tools.example/mcp", Tool: "get_page", Arg: "address"}}},
		{name: "tool server without url", cfg: "version: 1\nselftest:\n  tool_servers:\n    - name: web\n", err: "test.yaml:4: selftest.tool_servers[0].url: tool server \"web\" needs the url"},
		{name: "tool server bad url", cfg: "version: 1\nselftest:\n  tool_servers:\n    - name: web\n      url: localhost:9000\n", err: "test.yaml:5: selftest.tool_servers[0].url"},
		{name: "tool server bad name", cfg: "version: 1\nselftest:\n  tool_servers:\n    - name: \"a b\"\n      url: http://127.0.0.1:9000/mcp\n", err: "selftest.tool_servers[0].name: \"a b\": want a short name"},
		{name: "tool server duplicate", cfg: "version: 1\nselftest:\n  tool_servers:\n    - {name: a, url: \"http://127.0.0.1:9000/mcp\"}\n    - {name: a, url: \"http://127.0.0.1:9001/mcp\"}\n", err: "test.yaml:5: selftest.tool_servers[1].name: duplicate tool server \"a\""},
		{name: "tool server typo", cfg: "version: 1\nselftest:\n  tool_servers:\n    - {name: a, url: \"http://127.0.0.1:9000/mcp\", tol: x}\n", err: "unknown key \"tol\": did you mean \"tool\"?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse(strings.NewReader(tt.cfg), "test.yaml")
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p.Tools, tt.want) {
				t.Errorf("Tools = %+v, want %+v", p.Tools, tt.want)
			}
			if !reflect.DeepEqual(p.Selftest.ToolServers, tt.servers) {
				t.Errorf("ToolServers = %+v, want %+v", p.Selftest.ToolServers, tt.servers)
			}
		})
	}
}

func TestToolAllowed(t *testing.T) {
	for _, tt := range []struct {
		ids  []string
		who  string
		want bool
	}{{nil, "anyone", true}, {[]string{"agent"}, "agent", true}, {[]string{"agent"}, "other", false}, {[]string{"agent"}, "10.9.0.5", false}} {
		if got := (&Tools{Identities: tt.ids}).ToolAllowed(tt.who); got != tt.want {
			t.Errorf("Tools{%v}.ToolAllowed(%q) = %v, want %v", tt.ids, tt.who, got, tt.want)
		}
	}
}
