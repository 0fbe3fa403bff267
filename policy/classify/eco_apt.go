package classify

import (
	"bytes"
	"strings"
)

// MirrorApt is a Debian/Ubuntu archive layout.
var MirrorApt = register(&ecosystem{
	name:        "apt",
	grammar:     checkApt,
	knownWrites: aptKnownWrites,
	publish: Probe{"PUT", "/pool/main/e/egressd-selftest/egressd-selftest_0.0.0_all.deb",
		"application/vnd.debian.binary-package", "egressd-selftest"},
})

// aptKnownWrites: repository managers take a .deb as a write to its pool
// path (Artifactory, Nexus) or through aptly's API (/api/files,
// /api/repos, /api/publish).
func aptKnownWrites(_ *Request, p *pgPath, _ *pgQuery, safe bool) (PageType, string) {
	switch {
	case safe:
	case p.index("pool") >= 0 && len(p.segs) > 0 && bytes.HasSuffix(p.low(len(p.segs)-1), []byte(".deb")):
		return PageUpload, "known:apt-upload"
	case p.is(0, "api") && p.is(1, "files"):
		return PageUpload, "known:aptly-upload"
	case p.is(0, "api") && (p.is(1, "repos") || p.is(1, "publish")):
		return PagePublish, "known:aptly-api"
	}
	return PageRead, ""
}

// apt: <root>/dists/<suite>/... and <root>/pool/<component>/<prefix>/<source>/<file>.
// The root is up to three segments (debian, ubuntu, debian-security,
// ubuntu-ports ...). apt sends no query and no write.

func checkApt(c *mirrorCheck) MirrorVerdict {
	if !c.read {
		return mdeny(methodReason(c.r.Method))
	}
	if c.r.Query != "" {
		return mdeny(rNoQuery)
	}
	s := c.segs()
	if !c.p.dir {
		for k := 0; k < len(s) && k <= 3; k++ {
			switch s[k] {
			case "dists":
				if aptDists(s[k+1:]) {
					return mallow
				}
				return mdeny("apt: path outside download grammar")
			case "pool":
				if aptPool(s[k+1:]) {
					return mallow
				}
				return mdeny("apt: path outside download grammar")
			}
			if !csAptRoot.span(s[k], 64) {
				break
			}
		}
	}
	return mdeny("apt: path outside download grammar")
}

// aptDists accepts <suite>[/<dir>...]/<file>, 2 to 7 segments, with
// by-hash/<algo>/<hex> checked exactly.
func aptDists(s []string) bool {
	n := len(s)
	if n < 2 || n > 7 {
		return false
	}
	for i, x := range s {
		if !csApt.span(x, 64) {
			return false
		}
		if x == "by-hash" {
			if i != n-3 {
				return false
			}
			want := 0
			switch s[n-2] {
			case "MD5Sum":
				want = 32
			case "SHA1":
				want = 40
			case "SHA256":
				want = 64
			case "SHA512":
				want = 128
			}
			return want > 0 && isLowerHex(s[n-1], want)
		}
	}
	return true
}

// aptPool accepts <component>[/<component>]/<prefix>/<source>/<file>, where
// prefix is the source's first letter or "lib" plus one.
func aptPool(s []string) bool {
	n := len(s)
	if n < 4 || n > 5 {
		return false
	}
	for _, x := range s[:n-3] {
		if !csAptRoot.span(x, 32) {
			return false
		}
	}
	prefix, src, file := s[n-3], s[n-2], s[n-1]
	if !csAptSource.span(src, 100) || !csLowerAlnum[src[0]] {
		return false
	}
	if prefix != src[:1] && !(len(src) > 3 && strings.HasPrefix(src, "lib") && prefix == src[:4]) {
		return false
	}
	if !csAptFile.span(file, 200) {
		return false
	}
	for _, ext := range [...]string{".deb", ".udeb", ".ddeb", ".dsc", ".diff.gz",
		".tar.gz", ".tar.xz", ".tar.bz2", ".tar.zst", ".tar.lzma",
		".tar.gz.asc", ".tar.xz.asc", ".tar.bz2.asc"} {
		if len(file) > len(ext) && strings.HasSuffix(file, ext) {
			return true
		}
	}
	return false
}
