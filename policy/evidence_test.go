package policy

import (
	"strings"
	"testing"
	"time"
)

// TestAuditSigningConfig: audit.sign_key and its companions compile, with
// defaults, and name their problems.
func TestAuditSigningConfig(t *testing.T) {
	p := mustParse(t, "version: 1\nhoneytokens: true\naudit:\n  sign_key: file:/etc/egressd/audit.key\n  sign_key_previous: file:/etc/egressd/old.key\n  checkpoint_records: 10\n  checkpoint_interval: 5s\n")
	if a := p.Audit; a.SignKey != "/etc/egressd/audit.key" || a.SignKeyPrevious != "/etc/egressd/old.key" || a.CheckpointRecords != 10 || a.CheckpointInterval != 5*time.Second || !p.Honeytokens {
		t.Fatalf("audit %+v honeytokens %v", a, p.Honeytokens)
	}
	p = mustParse(t, "version: 1\n")
	if a := p.Audit; a.SignKey != "" || a.CheckpointRecords != defaultCheckpointRecords || a.CheckpointInterval != defaultCheckpointInterval || p.Honeytokens {
		t.Fatalf("defaults: %+v", a)
	}
	for _, tt := range []struct{ cfg, want string }{
		{"audit: {sign_key: /etc/k}", "audit.sign_key: \"/etc/k\": want file:/absolute/path"},
		{"audit: {sign_key_previous: file:/etc/k}", "audit.sign_key_previous: set without audit.sign_key"},
		{"audit: {checkpoint_records: 0}", "audit.checkpoint_records: 0: must be positive"},
		{"audit: {checkpoint_interval: soon}", "audit.checkpoint_interval"},
		{"honeytokens: maybe", "honeytokens"},
	} {
		if _, err := Parse(strings.NewReader("version: 1\n"+tt.cfg+"\n"), "t.yaml"); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want %q", tt.cfg, err, tt.want)
		}
	}
}
