//go:build unix && !linux

package sandbox

import (
	"os/exec"
	"syscall"
)

// NSExecCommandAs returns a command that fails: it is Linux-only.
func NSExecCommandAs(self, nsPath, resolvConf string, cred *syscall.Credential, argv []string) *exec.Cmd {
	return exec.Command(self, NSExecArg)
}

// NSExecCommandHiding returns a command that fails: it is Linux-only.
func NSExecCommandHiding(self, nsPath, resolvConf string, cred *syscall.Credential, hide []string, argv []string) *exec.Cmd {
	return exec.Command(self, NSExecArg)
}
