package policy

import "net/netip"

// builtinHighRiskCIDRs are cloud instance-metadata and control endpoints:
// reaching one from a sandbox hands out the host's credentials. They are
// denied under every rule, and by the DNS filter as answers.
var builtinHighRiskCIDRs = []netip.Prefix{
	pfx("169.254.169.254/32"), // AWS, GCP, Azure, Oracle, OpenStack, DigitalOcean, Hetzner IMDS
	pfx("169.254.169.253/32"), // AWS VPC DNS (answers internal names)
	pfx("169.254.169.123/32"), // AWS time sync (an IMDS-neighbour; never needed by a sandbox)
	pfx("169.254.170.2/32"),   // AWS ECS task metadata and credentials
	pfx("169.254.170.23/32"),  // AWS EKS Pod Identity agent
	pfx("fd00:ec2::254/128"),  // AWS IMDS over IPv6
	pfx("fd00:ec2::23/128"),   // AWS EKS Pod Identity over IPv6
	pfx("fd00:ec2::253/128"),  // AWS VPC DNS over IPv6
	pfx("100.100.100.200/32"), // Alibaba Cloud metadata
	pfx("192.0.0.192/32"),     // Oracle Cloud Infrastructure (classic) metadata
	pfx("168.63.129.16/32"),   // Azure WireServer / host agent
	pfx("10.96.0.1/32"),       // Kubernetes API, default service CIDR (kubeadm)
	pfx("10.43.0.1/32"),       // Kubernetes API, k3s default
	pfx("10.100.0.1/32"),      // Kubernetes API, EKS default
}

// builtinHighRiskNames are denied as exact names; builtinHighRiskSuffixes
// deny the name and every name under it. Wildcard-DNS services that map a
// name to any address (nip.io and friends) are listed because they are the
// usual way to spell a metadata address as a name.
var builtinHighRiskNames = []string{
	"metadata", "metadata.google.internal", "metadata.goog",
	"instance-data", "instance-data.ec2.internal",
	"metadata.tencentyun.com", "metadata.platformequinix.com", "metadata.packet.net",
	"kubernetes", "kubernetes.default", "kubernetes.default.svc",
	"localhost",
	// cloud consoles and sign-in: an agent has no business in them
	"console.aws.amazon.com", "signin.aws.amazon.com", "console.cloud.google.com",
	"portal.azure.com", "shell.azure.com", "ssh.cloud.google.com",
	"cloud.oracle.com", "console.cloud.oracle.com", "home.console.aliyun.com",
	"cloud.digitalocean.com",
	// package-registry upload and publish hosts
	"upload.pypi.org", "test.pypi.org", "uploads.github.com",
	"central.sonatype.com", "oss.sonatype.org", "s01.oss.sonatype.org",
	"api.anaconda.org", "push.rubygems.org",
}

var builtinHighRiskSuffixes = []string{
	"metadata.google.internal", "internal", "localhost",
	"kubernetes.default.svc", "svc.cluster.local", "cluster.local",
	"console.aws.amazon.com", "console.amazonaws-us-gov.com",
	"nip.io", "sslip.io", "xip.io", "localtest.me", "lvh.me", "vcap.me", "traefik.me",
}
