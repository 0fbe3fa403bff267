package configs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egressd/egressd/configs"
	"github.com/egressd/egressd/policy"
)

// TestEveryConfigLoads parses every YAML file in configs/.
func TestEveryConfigLoads(t *testing.T) {
	files, _ := filepath.Glob("*.yaml")
	if len(files) == 0 {
		t.Fatal("no configs found")
	}
	for _, f := range files {
		if _, err := policy.Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestDefaultPolicy: the embedded default is the file, allows the
// package downloads and the docs it names, and nothing else.
func TestDefaultPolicy(t *testing.T) {
	b, _ := os.ReadFile("default.yaml")
	if !bytes.Equal(b, configs.Default) {
		t.Fatal("embedded default differs from default.yaml")
	}
	p, err := policy.Parse(bytes.NewReader(configs.Default), configs.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		method, url string
		allow       bool
	}{
		{"GET", "https://pypi.org/simple/requests/", true},
		{"GET", "https://files.pythonhosted.org/packages/70/8e/0e2d847013cb52cd35b38c009bb167a1a26b2ce6cd6965bf26b47bc0bf44/requests-2.31.0-py3-none-any.whl", true},
		{"POST", "https://upload.pypi.org/legacy/", false},
		{"POST", "https://pypi.org/legacy/", false},
		{"GET", "https://index.crates.io/se/rd/serde", true},
		{"PUT", "https://crates.io/api/v1/crates/new", false},
		{"GET", "https://rubygems.org/gems/rails-7.1.0.gem", true},
		{"POST", "https://rubygems.org/api/v1/gems", false},
		{"GET", "https://docs.python.org/3/library/os.html", true},
		{"POST", "https://docs.python.org/3/search", false},
		{"GET", "https://github.com/", false},
		{"GET", "http://169.254.169.254/latest/meta-data/", false},
	}
	for _, tt := range tests {
		tg, err := policy.ParseURL(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		d := p.DecideRequest(&tg, tt.method, "", 0)
		if d.Allow != tt.allow {
			t.Errorf("%s %s: allow %v (%v %s), want %v", tt.method, tt.url, d.Allow, d.Reason, d.Detail, tt.allow)
		}
	}
	if !strings.Contains(string(configs.Default), "version: 1") {
		t.Error("default config has no version")
	}
}
