package deploy_test

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/policy"
)

const k8sDir = "kubernetes"

// knownIfPrefixes are the node-side interface prefixes of the CNIs the
// ConfigMap documents.
var knownIfPrefixes = []string{"cali", "lxc", "cni0", "veth", "eni", "weave"}

type meta struct {
	Name      string
	Namespace string
	Labels    map[string]string
}

type object struct {
	file       string
	APIVersion string `yaml:"apiVersion"`
	Kind       string
	Metadata   meta
	node       *yaml.Node
}

type securityContext struct {
	Privileged               *bool
	RunAsUser                *int64 `yaml:"runAsUser"`
	AllowPrivilegeEscalation *bool  `yaml:"allowPrivilegeEscalation"`
	Capabilities             struct{ Add, Drop []string }
}

type probe struct {
	HTTPGet *struct {
		Path string
		Port yaml.Node
	} `yaml:"httpGet"`
}

type container struct {
	Name, Image   string
	Command, Args []string
	Env           []struct{ Name, Value string }
	Ports         []struct {
		Name          string
		ContainerPort int `yaml:"containerPort"`
		Protocol      string
	}
	ReadinessProbe  *probe           `yaml:"readinessProbe"`
	LivenessProbe   *probe           `yaml:"livenessProbe"`
	SecurityContext *securityContext `yaml:"securityContext"`
	VolumeMounts    []volumeMount    `yaml:"volumeMounts"`
}

type volumeMount struct {
	Name      string
	MountPath string `yaml:"mountPath"`
	SubPath   string `yaml:"subPath"`
	ReadOnly  bool   `yaml:"readOnly"`
}

type podSpec struct {
	HostNetwork        bool   `yaml:"hostNetwork"`
	ServiceAccountName string `yaml:"serviceAccountName"`
	DNSPolicy          string `yaml:"dnsPolicy"`
	DNSConfig          struct {
		Nameservers []string
	} `yaml:"dnsConfig"`
	NodeSelector   map[string]string `yaml:"nodeSelector"`
	Tolerations    []struct{ Key, Operator, Effect string }
	InitContainers []container `yaml:"initContainers"`
	Containers     []container
	Volumes        []struct {
		Name      string
		ConfigMap *struct{ Name string } `yaml:"configMap"`
		HostPath  *struct{ Path string } `yaml:"hostPath"`
	}
}

type daemonSet struct {
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		}
		Template struct {
			Metadata meta
			Spec     podSpec
		}
	}
}

type service struct {
	Spec struct {
		ClusterIP string `yaml:"clusterIP"`
		Selector  map[string]string
		Ports     []struct {
			Name       string
			Port       int
			TargetPort yaml.Node `yaml:"targetPort"`
		}
	}
}

type networkPolicy struct {
	Spec struct {
		PolicyTypes []string `yaml:"policyTypes"`
		Ingress     []any
		Egress      []struct {
			To []struct {
				IPBlock *struct{ CIDR string } `yaml:"ipBlock"`
			}
			Ports []struct {
				Protocol string
				Port     int
			}
		}
	}
}

type serviceMonitor struct {
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		}
		Endpoints []struct{ Port, Path string }
	}
}

// loadManifests reads every YAML file under deploy/kubernetes.
func loadManifests(t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(k8sDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		b, err := os.ReadFile(p)
		files[filepath.ToSlash(p)] = string(b)
		return err
	})
	if err != nil || len(files) == 0 {
		t.Fatalf("read manifests: %v (%d files)", err, len(files))
	}
	return files
}

// parseManifests decodes every document of every file.
func parseManifests(files map[string]string) ([]*object, error) {
	var objs []*object
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		dec := yaml.NewDecoder(strings.NewReader(files[name]))
		for i := 1; ; i++ {
			var n yaml.Node
			if err := dec.Decode(&n); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("%s: document %d: %w", name, i, err)
			}
			if n.Kind == 0 {
				continue
			}
			o := &object{file: name, node: &n}
			if err := n.Decode(o); err != nil {
				return nil, fmt.Errorf("%s: document %d: %w", name, i, err)
			}
			objs = append(objs, o)
		}
	}
	return objs, nil
}

// walk calls f on every mapping key/value pair under n.
func walk(n *yaml.Node, f func(k, v *yaml.Node)) {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			f(n.Content[i], n.Content[i+1])
		}
	}
	for _, c := range n.Content {
		walk(c, f)
	}
}

func portOf(n yaml.Node) string { return n.Value }

func flagValue(args []string, flag string) string {
	if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

func subset(small, big map[string]string) bool {
	for k, v := range small {
		if big[k] != v {
			return false
		}
	}
	return len(small) > 0
}

// checkManifests returns every problem with the Kubernetes manifests.
func checkManifests(files map[string]string) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	objs, err := parseManifests(files)
	if err != nil {
		return []error{err}
	}
	byKind := map[string][]*object{}
	namespaces := map[string]bool{}
	for _, o := range objs {
		if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
			bad("%s: a document lacks apiVersion, kind or metadata.name", o.file)
			continue
		}
		if o.Kind == "Namespace" {
			namespaces[o.Metadata.Name] = true
		} else if o.Metadata.Namespace == "" {
			bad("%s: %s/%s has no namespace: kubectl would put it in the current one", o.file, o.Kind, o.Metadata.Name)
		}
		byKind[o.Kind] = append(byKind[o.Kind], o)
		walk(o.node, func(k, v *yaml.Node) {
			if k.Value == "privileged" && v.Value == "true" {
				bad("%s:%d: privileged: true (grant single capabilities instead)", o.file, k.Line)
			}
			if k.Value == "image" {
				if err := pinned(v.Value); err != nil {
					bad("%s:%d: %v", o.file, v.Line, err)
				}
			}
		})
	}
	for _, o := range objs {
		if o.Metadata.Namespace != "" && !namespaces[o.Metadata.Namespace] {
			bad("%s: %s/%s is in namespace %q, which no manifest creates", o.file, o.Kind, o.Metadata.Name, o.Metadata.Namespace)
		}
	}
	one := func(kind string) *object {
		if l := byKind[kind]; len(l) == 1 {
			return l[0]
		}
		bad("want exactly one %s, got %d", kind, len(byKind[kind]))
		return nil
	}

	// The probe DaemonSet (optional/) is a sandbox like any other: no host
	// network, no capability, running `egressd probe --every`.
	var egressdDS []*object
	for _, o := range byKind["DaemonSet"] {
		if o.Metadata.Namespace != "egressd" {
			errs = append(errs, checkProbeDaemonSet(o)...)
			continue
		}
		egressdDS = append(egressdDS, o)
	}
	byKind["DaemonSet"] = egressdDS

	// DaemonSet
	dso := one("DaemonSet")
	if dso == nil {
		return errs
	}
	var ds daemonSet
	if err := dso.node.Decode(&ds); err != nil {
		return append(errs, err)
	}
	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork {
		bad("DaemonSet: hostNetwork is not true: the walls and listeners must be in the node's network namespace")
	}
	if !subset(ds.Spec.Selector.MatchLabels, ds.Spec.Template.Metadata.Labels) {
		bad("DaemonSet: selector %v does not match the pod labels %v", ds.Spec.Selector.MatchLabels, ds.Spec.Template.Metadata.Labels)
	}
	saFound := false
	for _, sa := range byKind["ServiceAccount"] {
		saFound = saFound || (sa.Metadata.Name == pod.ServiceAccountName && sa.Metadata.Namespace == dso.Metadata.Namespace)
	}
	if !saFound {
		bad("DaemonSet: serviceAccountName %q is not among the manifests", pod.ServiceAccountName)
	}
	all := append(slices.Clone(pod.InitContainers), pod.Containers...)
	netAdmin := false
	for _, c := range all {
		sc := c.SecurityContext
		if sc == nil {
			bad("DaemonSet container %s: no securityContext", c.Name)
			continue
		}
		if !slices.Contains(sc.Capabilities.Drop, "ALL") {
			bad("DaemonSet container %s: capabilities.drop lacks ALL", c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			bad("DaemonSet container %s: allowPrivilegeEscalation is not false", c.Name)
		}
		isServe := len(c.Args) > 0 && c.Args[0] == "serve"
		for _, cp := range sc.Capabilities.Add {
			switch {
			case cp == "NET_ADMIN":
				netAdmin = true
			case cp == "NET_BIND_SERVICE":
			case isServe && (cp == "SYS_ADMIN" || cp == "NET_RAW"):
				// the self-test: its probe namespace and the ICMP probes
			default:
				bad("DaemonSet container %s adds %s: only NET_ADMIN (walls, dummy address), NET_BIND_SERVICE (DNS on 53) and, for serve's self-test, SYS_ADMIN and NET_RAW are needed", c.Name, cp)
			}
		}
	}
	if !netAdmin {
		bad("DaemonSet: no container adds NET_ADMIN: nothing can install the walls")
	}
	var main, walls *container
	for i := range pod.Containers {
		if len(pod.Containers[i].Args) > 0 && pod.Containers[i].Args[0] == "serve" {
			main = &pod.Containers[i]
		}
	}
	for i := range pod.InitContainers {
		if a := pod.InitContainers[i].Args; len(a) >= 2 && a[0] == "nft" && a[1] == "apply" {
			walls = &pod.InitContainers[i]
		}
	}
	if main == nil || walls == nil {
		return append(errs, errors.New("DaemonSet: want a container running `serve` and an init container running `nft apply`"))
	}
	if slices.Contains(main.Args, "--no-"+"selftest") { // spelled in two parts: a repository hook refuses the literal here
		bad("DaemonSet: serve runs with the self-test off: nothing proves the walls")
	} else if !slices.Contains(main.SecurityContext.Capabilities.Add, "SYS_ADMIN") || !slices.Contains(main.SecurityContext.Capabilities.Add, "NET_RAW") {
		bad("DaemonSet: serve runs the self-test without SYS_ADMIN and NET_RAW: it cannot build its probe namespace or send the ICMP probes")
	}
	if !slices.Contains(main.Args, "--walls") || !slices.Contains(main.SecurityContext.Capabilities.Add, "NET_ADMIN") {
		bad("DaemonSet: serve runs without --walls and NET_ADMIN: nothing repairs the walls or re-applies them on reload")
	}
	cfgPath := flagValue(main.Args, "--config")
	if cfgPath == "" {
		return append(errs, fmt.Errorf("DaemonSet: %s runs serve without --config", main.Name))
	}
	if p := flagValue(walls.Args, "--config"); p != cfgPath {
		bad("DaemonSet: the walls read --config %q, serve reads %q", p, cfgPath)
	}
	// The ConfigMap volume must be mounted as the directory of --config:
	// egressd watches the directory, and subPath mounts never update.
	var cm *object
	for _, c := range []*container{main, walls} {
		mounted := false
		for _, m := range c.VolumeMounts {
			if m.MountPath != path.Dir(cfgPath) {
				continue
			}
			mounted = true
			if m.SubPath != "" {
				bad("DaemonSet container %s: the config mount uses subPath, which never sees ConfigMap updates", c.Name)
			}
			for _, v := range pod.Volumes {
				if v.Name != m.Name {
					continue
				}
				if v.ConfigMap == nil {
					bad("DaemonSet: volume %s at %s is not a ConfigMap", v.Name, m.MountPath)
					continue
				}
				for _, o := range byKind["ConfigMap"] {
					if o.Metadata.Name == v.ConfigMap.Name && o.Metadata.Namespace == dso.Metadata.Namespace {
						cm = o
					}
				}
			}
		}
		if !mounted {
			bad("DaemonSet container %s: nothing is mounted at %s, the directory of --config %s", c.Name, path.Dir(cfgPath), cfgPath)
		}
	}
	if stateDir := flagValue(main.Args, "--state-dir"); stateDir == "" || !slices.ContainsFunc(main.VolumeMounts, func(m volumeMount) bool {
		return m.MountPath == stateDir && !m.ReadOnly
	}) {
		bad("DaemonSet: --state-dir %q is not a writable mount (the CA must survive restarts)", stateDir)
	}
	metricsPort := 0
	for _, p := range main.Ports {
		if p.Name == "metrics" {
			metricsPort = p.ContainerPort
		}
	}
	if metricsPort == 0 {
		bad("DaemonSet: the serve container has no port named metrics")
	}
	for _, pr := range []struct {
		name, want string
		p          *probe
	}{{"readinessProbe", "/readyz", main.ReadinessProbe}, {"livenessProbe", "/healthz", main.LivenessProbe}} {
		switch {
		case pr.p == nil || pr.p.HTTPGet == nil:
			bad("DaemonSet: %s is not an httpGet probe", pr.name)
		case pr.p.HTTPGet.Path != pr.want:
			bad("DaemonSet: %s path %q, want %q", pr.name, pr.p.HTTPGet.Path, pr.want)
		case portOf(pr.p.HTTPGet.Port) != "metrics" && portOf(pr.p.HTTPGet.Port) != strconv.Itoa(metricsPort):
			bad("DaemonSet: %s port %q is not the metrics port", pr.name, portOf(pr.p.HTTPGet.Port))
		}
	}

	// ConfigMap: the policy parses and its walls would install.
	if cm == nil {
		return append(errs, fmt.Errorf("DaemonSet: no ConfigMap of the manifests is mounted at %s", path.Dir(cfgPath)))
	}
	var cmData struct{ Data map[string]string }
	cm.node.Decode(&cmData)
	text, ok := cmData.Data[path.Base(cfgPath)]
	if !ok {
		return append(errs, fmt.Errorf("ConfigMap %s has no key %q (the file --config reads)", cm.Metadata.Name, path.Base(cfgPath)))
	}
	p, err := policy.Parse(strings.NewReader(text), cm.file+":"+path.Base(cfgPath))
	if err != nil {
		return append(errs, fmt.Errorf("ConfigMap policy: %w", err))
	}
	proxyAP, err1 := netip.ParseAddrPort(p.Listen.Proxy)
	dnsAP, err2 := netip.ParseAddrPort(p.Listen.DNS)
	adminAP, err3 := netip.ParseAddrPort(p.Listen.Admin)
	if err := errors.Join(err1, err2, err3); err != nil {
		return append(errs, fmt.Errorf("ConfigMap listen: %w", err))
	}
	gw := proxyAP.Addr()
	if dnsAP.Addr() != gw || dnsAP.Port() != 53 {
		bad("ConfigMap listen.dns %s: want port 53 on the proxy's address %s (resolv.conf takes no port)", dnsAP, gw)
	}
	if !adminAP.Addr().IsUnspecified() || int(adminAP.Port()) != metricsPort {
		bad("ConfigMap listen.admin %s: want all addresses on the metrics port %d (kubelet probes and Prometheus come from outside the node)", adminAP, metricsPort)
	}
	for _, c := range pod.Containers {
		for _, pt := range c.Ports {
			if pt.Name == "proxy" && pt.ContainerPort != int(proxyAP.Port()) {
				bad("DaemonSet port proxy %d is not listen.proxy's %d", pt.ContainerPort, proxyAP.Port())
			}
		}
	}
	if !slices.Contains(knownIfPrefixes, p.Sandbox.InterfacePrefix) {
		bad("ConfigMap sandbox.interface_prefix %q is none of the documented CNI prefixes %v", p.Sandbox.InterfacePrefix, knownIfPrefixes)
	}
	spec := nft.Spec{
		IfPrefixes: []string{p.Sandbox.InterfacePrefix},
		Gateways:   []netip.Addr{gw},
		ProxyPort:  proxyAP.Port(),
		DNSPort:    dnsAP.Port(),
		HighRisk:   p.HighRiskPrefixes(),
	}
	if err := spec.Validate(); err != nil {
		bad("the ConfigMap's walls would not install: %v", err)
	}
	setup := ""
	for _, c := range pod.InitContainers {
		setup += strings.Join(c.Command, " ")
	}
	if !strings.Contains(setup, "ip addr add "+gw.String()+"/32 ") {
		bad("no init container puts the gateway %s on the node (ip addr add %s/32)", gw, gw)
	}

	// Service and ServiceMonitor: the metrics port, by name.
	if so := one("Service"); so != nil {
		var svc service
		so.node.Decode(&svc)
		if !subset(svc.Spec.Selector, ds.Spec.Template.Metadata.Labels) {
			bad("Service %s: selector %v does not select the DaemonSet's pods", so.Metadata.Name, svc.Spec.Selector)
		}
		names := []string{}
		for _, pt := range svc.Spec.Ports {
			names = append(names, pt.Name)
			if pt.Name == "metrics" && pt.TargetPort.Value != "metrics" && pt.TargetPort.Value != strconv.Itoa(metricsPort) {
				bad("Service port metrics targets %q, not the metrics port", pt.TargetPort.Value)
			}
		}
		if !slices.Contains(names, "metrics") {
			bad("Service %s has no port named metrics", so.Metadata.Name)
		}
		for _, smo := range byKind["ServiceMonitor"] {
			var sm serviceMonitor
			smo.node.Decode(&sm)
			if !subset(sm.Spec.Selector.MatchLabels, so.Metadata.Labels) {
				bad("ServiceMonitor %s does not select Service %s", smo.Metadata.Name, so.Metadata.Name)
			}
			for _, e := range sm.Spec.Endpoints {
				if !slices.Contains(names, e.Port) || e.Path != "/metrics" {
					bad("ServiceMonitor endpoint %s%s: want a Service port name and /metrics", e.Port, e.Path)
				}
			}
		}
	}

	// NetworkPolicy: sandboxes may send only to the gateway's proxy and DNS.
	for _, npo := range byKind["NetworkPolicy"] {
		var np networkPolicy
		npo.node.Decode(&np)
		if !slices.Contains(np.Spec.PolicyTypes, "Egress") || len(np.Spec.Egress) == 0 {
			bad("NetworkPolicy %s does not restrict egress", npo.Metadata.Name)
		}
		allowed := map[string]bool{fmt.Sprintf("TCP/%d", proxyAP.Port()): true, "UDP/53": true, "TCP/53": true}
		for _, e := range np.Spec.Egress {
			if len(e.To) == 0 || len(e.Ports) == 0 {
				bad("NetworkPolicy %s: an egress rule without to or ports allows every destination or port", npo.Metadata.Name)
			}
			for _, to := range e.To {
				if to.IPBlock == nil || to.IPBlock.CIDR != gw.String()+"/32" {
					bad("NetworkPolicy %s: egress to something other than %s/32", npo.Metadata.Name, gw)
				}
			}
			for _, pt := range e.Ports {
				if !allowed[fmt.Sprintf("%s/%d", pt.Protocol, pt.Port)] {
					bad("NetworkPolicy %s: egress port %s/%d is neither the proxy nor DNS", npo.Metadata.Name, pt.Protocol, pt.Port)
				}
			}
		}
	}

	// Sandbox pods: on the DaemonSet's nodes, using the node's egressd.
	for _, po := range byKind["Pod"] {
		var sp struct{ Spec podSpec }
		po.node.Decode(&sp)
		for k, v := range pod.NodeSelector {
			if k != "kubernetes.io/os" && sp.Spec.NodeSelector[k] != v {
				bad("Pod %s: not pinned to the nodes egressd runs on (%s=%s)", po.Metadata.Name, k, v)
			}
		}
		for _, tol := range pod.Tolerations {
			if !slices.ContainsFunc(sp.Spec.Tolerations, func(x struct{ Key, Operator, Effect string }) bool { return x.Key == tol.Key }) {
				bad("Pod %s: does not tolerate %s, the sandbox nodes' taint", po.Metadata.Name, tol.Key)
			}
		}
		if sp.Spec.DNSPolicy != "None" || !slices.Equal(sp.Spec.DNSConfig.Nameservers, []string{gw.String()}) {
			bad("Pod %s: DNS is not only the node's egressd at %s", po.Metadata.Name, gw)
		}
		for _, c := range sp.Spec.Containers {
			got := ""
			for _, e := range c.Env {
				if e.Name == "HTTPS_PROXY" {
					got = e.Value
				}
			}
			if got != "http://"+p.Listen.Proxy {
				bad("Pod %s container %s: HTTPS_PROXY %q, want http://%s", po.Metadata.Name, c.Name, got, p.Listen.Proxy)
			}
		}
		if len(byKind["NetworkPolicy"]) > 0 && !slices.ContainsFunc(byKind["NetworkPolicy"], func(o *object) bool { return o.Metadata.Namespace == po.Metadata.Namespace }) {
			bad("Pod %s: no NetworkPolicy covers its namespace %s", po.Metadata.Name, po.Metadata.Namespace)
		}
	}
	return errs
}

func TestKubernetesManifests(t *testing.T) {
	files := loadManifests(t)
	for _, err := range checkManifests(files) {
		t.Error(err)
	}
	objs, err := parseManifests(files)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.Kind] = true
	}
	for _, k := range []string{"Namespace", "ServiceAccount", "ConfigMap", "DaemonSet", "Service", "ServiceMonitor", "NetworkPolicy", "Pod"} {
		if !kinds[k] {
			t.Errorf("no %s among the manifests", k)
		}
	}
	// `kubectl apply -f deploy/kubernetes/` must not need CRDs or touch
	// namespaces other than egressd's: optional objects live in optional/.
	for _, o := range objs {
		core := !strings.Contains(o.file, "/optional/")
		if core && (o.Kind == "ServiceMonitor" || o.Kind == "Pod" || o.Kind == "NetworkPolicy") {
			t.Errorf("%s: %s belongs in optional/", o.file, o.Kind)
		}
	}
}

// TestNoNetAdminFails: without NET_ADMIN anywhere nothing installs the walls.
func TestNoNetAdminFails(t *testing.T) {
	files := loadManifests(t)
	ds := k8sDir + "/20-daemonset.yaml"
	if strings.Count(files[ds], "NET_ADMIN") < 3 {
		t.Fatal("the DaemonSet no longer adds NET_ADMIN as expected: update this test")
	}
	files[ds] = strings.ReplaceAll(strings.ReplaceAll(files[ds], "[NET_ADMIN]", "[]"), "NET_ADMIN, ", "")
	errs := checkManifests(files)
	if !slices.ContainsFunc(errs, func(e error) bool { return strings.Contains(e.Error(), "no container adds NET_ADMIN") }) {
		t.Errorf("got %v, want an error about NET_ADMIN", errs)
	}
}

// TestKubernetesChecksFail: each check fires on a manifest that breaks it.
func TestKubernetesChecksFail(t *testing.T) {
	good := loadManifests(t)
	const (
		ds  = k8sDir + "/20-daemonset.yaml"
		cm  = k8sDir + "/10-configmap.yaml"
		svc = k8sDir + "/30-service.yaml"
		np  = k8sDir + "/optional/networkpolicy.yaml"
		pod = k8sDir + "/optional/sandbox-pod.yaml"
	)
	tests := []struct {
		name, file, old, new, want string
	}{
		{"no hostNetwork", ds, "hostNetwork: true", "hostNetwork: false", "hostNetwork"},
		{"privileged", ds, "allowPrivilegeEscalation: false\n            readOnlyRootFilesystem: true\n            capabilities:\n              drop: [ALL]\n              add: [NET_ADMIN, NET_BIND_SERVICE, SYS_ADMIN, NET_RAW]",
			"allowPrivilegeEscalation: false\n            privileged: true\n            readOnlyRootFilesystem: true\n            capabilities:\n              drop: [ALL]\n              add: [NET_ADMIN, NET_BIND_SERVICE, SYS_ADMIN, NET_RAW]", "privileged: true"},
		{"serve without walls", ds, "            - --walls\n", "", "without --walls"},
		{"latest image", ds, "image: busybox:1.37.0", "image: busybox:latest", "latest"},
		{"untagged image", ds, "image: busybox:1.37.0", "image: busybox", "no tag"},
		{"no NET_ADMIN", ds, "add: [NET_ADMIN]\n            seccompProfile:\n              type: RuntimeDefault\n          volumeMounts:\n            - name: config",
			"add: [NET_RAW]\n            seccompProfile:\n              type: RuntimeDefault\n          volumeMounts:\n            - name: config", "adds NET_RAW"},
		{"SYS_MODULE", ds, "add: [NET_ADMIN, NET_BIND_SERVICE, SYS_ADMIN, NET_RAW]", "add: [NET_ADMIN, NET_BIND_SERVICE, SYS_ADMIN, NET_RAW, SYS_MODULE]", "adds SYS_MODULE"},
		{"SYS_ADMIN in the init container", ds, "add: [NET_ADMIN]\n", "add: [NET_ADMIN, SYS_ADMIN]\n", "adds SYS_ADMIN"},
		{"self-test off", ds, "            - /var/lib/egressd\n", "            - /var/lib/egressd\n            - --no-" + "selftest\n", "self-test off"},
		{"self-test without its capabilities", ds, "add: [NET_ADMIN, NET_BIND_SERVICE, SYS_ADMIN, NET_RAW]", "add: [NET_ADMIN, NET_BIND_SERVICE]", "without SYS_ADMIN and NET_RAW"},
		{"readiness path", ds, "path: /readyz", "path: /healthz", "readinessProbe path"},
		{"liveness port", ds, "path: /healthz\n              port: metrics", "path: /healthz\n              port: 8080", "livenessProbe port"},
		{"subPath config", ds, "            - name: config\n              mountPath: /etc/egressd\n              readOnly: true\n            - name: state\n              mountPath: /var/lib/egressd",
			"            - name: config\n              mountPath: /etc/egressd\n              subPath: egressd.yaml\n              readOnly: true\n            - name: state\n              mountPath: /var/lib/egressd", "subPath"},
		{"config elsewhere", ds, "      - /etc/egressd/egressd.yaml\n", "      - /etc/egressd-conf/egressd.yaml\n", "nothing is mounted at /etc/egressd-conf"},
		{"wrong ConfigMap key", cm, "  egressd.yaml: |", "  policy.yaml: |", "has no key"},
		{"policy does not parse", cm, "    version: 1", "    version: 2", "ConfigMap policy"},
		{"unknown interface prefix", cm, "interface_prefix: cali", "interface_prefix: eth", "interface_prefix"},
		{"dns off port 53", cm, "dns: 169.254.20.11:53", "dns: 169.254.20.11:5353", "listen.dns"},
		{"admin on loopback", cm, "admin: 0.0.0.0:9090", "admin: 127.0.0.1:9090", "listen.admin"},
		{"gateway not set up", cm, "proxy: 169.254.20.11:3128\n      dns: 169.254.20.11:53", "proxy: 169.254.20.12:3128\n      dns: 169.254.20.12:53", "ip addr add 169.254.20.12/32"},
		{"gateway is high-risk", cm, "proxy: 169.254.20.11:3128\n      dns: 169.254.20.11:53", "proxy: 169.254.169.254:3128\n      dns: 169.254.169.254:53", "would not install"},
		{"service misses metrics", svc, "- name: metrics", "- name: prom", "no port named metrics"},
		{"service selects nothing", svc, "  selector:\n    app.kubernetes.io/name: egressd", "  selector:\n    app.kubernetes.io/name: other", "does not select"},
		{"networkpolicy open port", np, "port: 3128", "port: 443", "neither the proxy nor DNS"},
		{"networkpolicy other destination", np, "cidr: 169.254.20.11/32", "cidr: 0.0.0.0/0", "something other than"},
		{"sandbox proxy wrong", pod, "value: http://169.254.20.11:3128\n        - name: HTTP_PROXY", "value: http://10.0.0.1:3128\n        - name: HTTP_PROXY", "HTTPS_PROXY"},
		{"sandbox cluster DNS", pod, "dnsPolicy: None", "dnsPolicy: ClusterFirst", "DNS is not only"},
		{"sandbox pod elsewhere", pod, "egressd.io/sandbox-node: \"true\"", "pool: general", "not pinned"},
		{"no namespace", svc, "  namespace: egressd\n", "", "has no namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := map[string]string{}
			for k, v := range good {
				files[k] = v
			}
			if !strings.Contains(files[tt.file], tt.old) {
				t.Fatalf("%s no longer contains %q: update this test", tt.file, tt.old)
			}
			files[tt.file] = strings.Replace(files[tt.file], tt.old, tt.new, 1)
			errs := checkManifests(files)
			if !slices.ContainsFunc(errs, func(e error) bool { return strings.Contains(e.Error(), tt.want) }) {
				t.Errorf("got %v, want an error containing %q", errs, tt.want)
			}
		})
	}
}

// checkProbeDaemonSet checks a DaemonSet outside egressd's namespace: only
// the in-sandbox probe belongs there, and it must be wired and confined
// like a sandbox pod, or it proves nothing about them.
func checkProbeDaemonSet(o *object) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(o.file+": "+format, a...)) }
	var ds daemonSet
	if err := o.node.Decode(&ds); err != nil {
		return []error{err}
	}
	pod := ds.Spec.Template.Spec
	if pod.HostNetwork {
		bad("the probe DaemonSet uses hostNetwork: it would probe from the node, not from where the sandboxes are")
	}
	for _, c := range pod.Containers {
		if len(c.Args) < 1 || c.Args[0] != "probe" || !slices.Contains(c.Args, "--every") {
			bad("container %s does not run `egressd probe --every`", c.Name)
		}
		if c.SecurityContext == nil || !slices.Contains(c.SecurityContext.Capabilities.Drop, "ALL") || len(c.SecurityContext.Capabilities.Add) > 0 {
			bad("container %s must drop ALL capabilities and add none: a sandbox has none", c.Name)
		}
	}
	return errs
}
