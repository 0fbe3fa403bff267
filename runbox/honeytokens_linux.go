package runbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/egressd/egressd/honeytoken"
)

// awsCredentialsVar points the AWS SDKs and CLI at the run's canary
// credentials file.
const awsCredentialsVar = "AWS_SHARED_CREDENTIALS_FILE"

// issueHoneytokens makes the run's canaries for identity and adds them to
// the store in stateDir, so the gateway (and any serve sharing the state
// directory, and the report) knows them.
func issueHoneytokens(stateDir, identity string) ([]honeytoken.Token, error) {
	ts, err := honeytoken.Issue(identity)
	if err != nil {
		return nil, err
	}
	if err := honeytoken.Append(stateDir, ts); err != nil {
		return nil, fmt.Errorf("honeytokens: %w", err)
	}
	return ts, nil
}

func honeytokenNames(ts []honeytoken.Token) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Name
	}
	return strings.Join(names, ",")
}

// placeHoneytokens adds the canaries to env — replacing a host variable
// of the same name unless --env kept it — and writes the AWS shared
// credentials file (owned by CMD's user) into the run's temp dir.
func (b *box) placeHoneytokens(env []string, c Config) ([]string, error) {
	f := honeytoken.Files(b.canaries)[".aws/credentials"]
	path := filepath.Join(b.tmp, "aws-credentials")
	if err := os.WriteFile(path, []byte(f), 0o600); err != nil {
		return nil, fmt.Errorf("honeytokens: %w", err)
	}
	if c.Cred != nil {
		if err := os.Chown(path, int(c.Cred.Uid), int(c.Cred.Gid)); err != nil {
			return nil, fmt.Errorf("honeytokens: %w", err)
		}
	}
	add := append(honeytoken.EnvLines(b.canaries), awsCredentialsVar+"="+path)
	return mergeEnv(env, add, c.KeepEnv), nil
}

// mergeEnv sets each KEY=VALUE of add in env, except keys the user kept
// (--env), which stay as they are.
func mergeEnv(env, add, keep []string) []string {
	set := map[string]bool{}
	var out []string
	for _, kv := range add {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(keep, k) {
			set[k] = true
			out = append(out, kv)
		}
	}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !set[k] {
			out = append(out, kv)
		}
	}
	return out
}
