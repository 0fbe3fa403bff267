// Package configs holds egressd's example configs and embeds the default
// policy that `egressd serve` runs when no --config is given.
package configs

import _ "embed"

// Default is configs/default.yaml.
//
//go:embed default.yaml
var Default []byte

// DefaultName is how errors and logs name the embedded default.
const DefaultName = "embedded:configs/default.yaml"
