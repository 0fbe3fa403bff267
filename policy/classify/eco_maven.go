package classify

import "strings"

// MirrorMaven is a Maven repository layout.
var MirrorMaven = register(&ecosystem{
	name:        "maven",
	grammar:     checkMaven,
	knownWrites: mavenKnownWrites,
	publish: Probe{"PUT", "/maven2/org/egressd/selftest/0.0.0/selftest-0.0.0.jar", "application/java-archive",
		"egressd-selftest"},
})

// mavenKnownWrites: a deploy PUTs to the very paths a build downloads
// (<group>/<artifact>/<version>/<artifact>-<version>.<ext> and
// maven-metadata.xml), so any other method on such a path publishes.
func mavenKnownWrites(_ *Request, p *pgPath, _ *pgQuery, safe bool) (PageType, string) {
	n := len(p.segs)
	if !safe && p.is(0, "api") && p.is(1, "v1") && p.is(2, "publisher") {
		// Sonatype Central's Publisher API: upload a bundle, then publish
		// or drop the deployment.
		if p.is(3, "upload") {
			return PageUpload, "known:sonatype-upload"
		}
		return PagePublish, "known:sonatype-publish"
	}
	if safe || n < 3 {
		return PageRead, ""
	}
	last := string(p.orig(n - 1))
	if isMavenMetadata(last) || mavenFile(last, string(p.orig(n-3)), string(p.orig(n-2))) {
		return PageUpload, "known:maven-deploy"
	}
	return PageRead, ""
}

// Maven: <group path>/<artifact>/<version>/<artifact>-<version>[-<classifier>].<ext>
// and maven-metadata.xml with checksums. Deploy PUTs to the very same paths,
// so the method is the only difference. The repository root ("/maven2/",
// "/repository/releases/") is part of the group path as far as the grammar
// can tell.

func checkMaven(c *mirrorCheck) MirrorVerdict {
	s := c.segs()
	n := len(s)
	for i := 0; i+1 < n; i++ {
		if s[i] == "service" && s[i+1] == "local" {
			return mdeny("maven staging deploy: /service/local/")
		}
	}
	if n >= 3 && s[0] == "api" && s[1] == "v1" && s[2] == "publisher" {
		return mdeny("maven central publish: /api/v1/publisher/")
	}
	if !c.read {
		switch c.r.Method {
		case "PUT":
			return mdeny("maven deploy: PUT to a repository path")
		case "MKCOL":
			return mdeny("maven deploy: MKCOL")
		}
		return mdeny(methodReason(c.r.Method))
	}
	if c.r.Query != "" {
		return mdeny(rNoQuery)
	}
	if c.p.dir || n < 3 {
		return mdeny("maven: path outside download grammar")
	}
	for _, x := range s[:n-1] {
		if !csMavenVer.span(x, 128) {
			return mdeny("maven: path outside download grammar")
		}
	}
	if isMavenMetadata(s[n-1]) || n >= 4 && mavenFile(s[n-1], s[n-3], s[n-2]) {
		return mallow
	}
	return mdeny("maven: path outside download grammar")
}

func isMavenMetadata(f string) bool {
	switch f {
	case "maven-metadata.xml", "maven-metadata.xml.sha1", "maven-metadata.xml.md5",
		"maven-metadata.xml.sha256", "maven-metadata.xml.sha512":
		return true
	}
	return false
}

// mavenFile checks that file is <a>-<v>[-<classifier>].<ext>; for a
// -SNAPSHOT version the file may carry a timestamp instead
// (a-1.0-20240101.123456-7.jar).
func mavenFile(file, a, v string) bool {
	if !csMaven.span(a, 128) || !csMavenVer.span(v, 128) || !csMaven.span(file, 255) {
		return false
	}
	rest, ok := strings.CutPrefix(file, a)
	if !ok || rest == "" || rest[0] != '-' {
		return false
	}
	rest = rest[1:]
	if r, ok := strings.CutPrefix(rest, v); ok {
		rest = r
	} else if base, snap := strings.CutSuffix(v, "SNAPSHOT"); snap && strings.HasPrefix(rest, base) {
		if rest, ok = cutSnapshotStamp(rest[len(base):]); !ok {
			return false
		}
	} else {
		return false
	}
	if rest == "" {
		return false
	}
	if rest[0] == '-' { // classifier
		cls, ext, ok := strings.Cut(rest[1:], ".")
		return ok && cls != "" && mavenExt(ext)
	}
	return rest[0] == '.' && mavenExt(rest[1:])
}

// mavenExt accepts jar, pom, tar.gz, jar.sha1, jar.asc.sha256 ...
func mavenExt(ext string) bool {
	return csMavenExt.span(ext, 20) && ext[0] != '.' && ext[len(ext)-1] != '.' && !strings.Contains(ext, "..")
}

// cutSnapshotStamp cuts yyyyMMdd.HHmmss-N off s.
func cutSnapshotStamp(s string) (string, bool) {
	if len(s) < 17 || !csDigit.span(s[:8], 8) || s[8] != '.' || !csDigit.span(s[9:15], 6) || s[15] != '-' {
		return "", false
	}
	i := 16
	for i < len(s) && i < 26 && csDigit[s[i]] {
		i++
	}
	if i == 16 {
		return "", false
	}
	return s[i:], true
}
