package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"

	"github.com/egressd/egressd/configs"
	"github.com/egressd/egressd/policy"
)

// loadPolicy loads the config at path, or the embedded default when path is
// empty.
func loadPolicy(path string) (*policy.Policy, error) {
	if path == "" {
		return policy.Parse(bytes.NewReader(configs.Default), configs.DefaultName)
	}
	return policy.Load(path)
}

// parseFlags parses flags that may come before and after positional
// arguments ("check URL --json"), stopping at "--".
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// newFlagSet makes a subcommand's flag set; its usage (on -h or a bad
// flag) lists every flag.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("egressd "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "flags of egressd %s:\n", name)
		fs.PrintDefaults()
	}
	if flagSetMade != nil {
		flagSetMade(fs)
	}
	return fs
}

// flagSetMade, when set (tests), sees every flag set a command makes.
var flagSetMade func(*flag.FlagSet)

func configFlag(fs *flag.FlagSet) *string {
	return fs.String("config", "", "config file (default: the embedded configs/default.yaml)")
}

func printConfigError(stderr io.Writer, err error) {
	fmt.Fprintf(stderr, "%v\n", err)
}
