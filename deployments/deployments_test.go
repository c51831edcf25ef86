package deployments

// These tests keep the deployment files consistent with the code. Which
// metrics they use is checked against a real node's /metrics in test/e2e
// (TestDeploymentsUseRealMetrics).

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/ordo-db/ordo/internal/certs"
	"github.com/ordo-db/ordo/pkg/config"
)

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// requirePeerTLS fails unless node n authenticates its peers with its own
// certificate: every node a deployment runs listens for peers on a
// non-loopback address, where plaintext Raft lets anyone write to every
// database.
func requirePeerTLS(t *testing.T, where string, n *config.Node) {
	t.Helper()
	pt := n.PeerTLS
	if pt.CertFile == "" || pt.KeyFile == "" || pt.CAFile == "" || n.Insecure {
		t.Errorf("%s: node %d has no peer TLS (peer_tls %+v, insecure %v): every shipped node configuration must use mutual TLS between nodes", where, n.ID, pt, n.Insecure)
		return
	}
	cert, key := certs.NodeFiles(uint64(n.ID))
	if filepath.Base(pt.CertFile) != cert || filepath.Base(pt.KeyFile) != key {
		t.Errorf("%s: node %d uses %s and %s, not its own %s and %s", where, n.ID, pt.CertFile, pt.KeyFile, cert, key)
	}
	if filepath.Dir(pt.CertFile) != filepath.Dir(pt.KeyFile) || filepath.Dir(pt.CertFile) != filepath.Dir(pt.CAFile) {
		t.Errorf("%s: node %d's peer TLS files are not in one directory", where, n.ID)
	}
}

// requireClientTLS fails unless node n serves its client port with TLS
// only: the shipped deployments listen for clients on every address, and
// passwords and rows would otherwise cross the network in clear.
func requireClientTLS(t *testing.T, where string, n *config.Node) {
	t.Helper()
	if n.TLS.CertFile == "" || n.TLS.KeyFile == "" || n.TLS.AllowPlaintext == nil || *n.TLS.AllowPlaintext {
		t.Errorf("%s: node %d does not require TLS of its clients (tls %+v): every shipped node configuration must", where, n.ID, n.TLS)
	}
}

// TestComposeNodeConfigsAreValid loads every node configuration the
// compose file mounts with Ordo's own loader (config.Parse: the files it
// names are in the containers), and checks the cluster they describe: ids,
// peers and protocol agree, each node talks to its own PostgreSQL service,
// and each has peer TLS from its own volume, filled by the certs service.
func TestComposeNodeConfigsAreValid(t *testing.T) {
	var compose struct {
		Services map[string]struct {
			Volumes     []string       `yaml:"volumes"`
			DependsOn   map[string]any `yaml:"depends_on"`
			Command     any            `yaml:"command"`
			Healthcheck struct {
				Test []string `yaml:"test"`
			} `yaml:"healthcheck"`
		} `yaml:"services"`
		Postgres struct {
			Command string `yaml:"command"`
		} `yaml:"x-postgres"`
	}
	readYAML(t, "compose/docker-compose.yml", &compose)
	nodes := map[uint32]*config.Node{}
	for name, svc := range compose.Services {
		for _, v := range svc.Volumes {
			src, dst, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") {
				if _, err := os.Stat(filepath.Join("compose", src)); err != nil {
					t.Errorf("service %s mounts %s, which does not exist: %v", name, src, err)
				}
			}
			if !strings.HasPrefix(dst, "/etc/ordo/node.yaml") {
				continue
			}
			n, err := config.Parse(filepath.Join("compose", src))
			if err != nil {
				t.Errorf("service %s: %v", name, err)
				continue
			}
			requirePeerTLS(t, "compose service "+name, n)
			requireClientTLS(t, "compose service "+name, n)
			requireAdmin(t, "compose service "+name, n)
			if filepath.Dir(n.TLS.CertFile) != filepath.Dir(n.PeerTLS.CertFile) {
				t.Errorf("service %s: its client certificate is not in the volume the certs service fills", name)
			}
			if hc := strings.Join(svc.Healthcheck.Test, " "); !strings.Contains(hc, "/readyz") || !strings.Contains(hc, "127.0.0.1/"+port(t, n.MetricsListen)) {
				t.Errorf("service %s: its healthcheck %q does not ask /readyz on its metrics port %s", name, hc, n.MetricsListen)
			}
			certVolume := ""
			for _, v := range svc.Volumes {
				if parts := strings.Split(v, ":"); len(parts) >= 2 && parts[1] == filepath.Dir(n.PeerTLS.CertFile) {
					certVolume = parts[0]
				}
			}
			if certVolume == "" || !slices.Contains(compose.Services["certs"].Volumes, certVolume+":/certs"+itoa(n.ID)) {
				t.Errorf("service %s: its peer TLS directory is not the volume the certs service fills for node %d", name, n.ID)
			}
			if _, ok := svc.DependsOn["certs"]; !ok {
				t.Errorf("service %s does not wait for the certs service", name)
			}
			if want := "ordo" + itoa(n.ID); name != want {
				t.Errorf("service %s runs node id %d (want service %s)", name, n.ID, want)
			}
			pg := "pg" + itoa(n.ID)
			if !strings.Contains(n.Postgres, "@"+pg+":") {
				t.Errorf("node %d connects to %s, not its own server %s", n.ID, n.Postgres, pg)
			}
			if _, ok := svc.DependsOn[pg]; !ok {
				t.Errorf("service %s does not wait for %s", name, pg)
			}
			nodes[n.ID] = n
		}
	}
	if len(nodes) != 3 {
		t.Fatalf("compose runs %d nodes, want 3", len(nodes))
	}
	for id, n := range nodes {
		if len(n.Peers) != len(nodes) || n.Protocol != nodes[1].Protocol {
			t.Errorf("node %d: peers %v, protocol %s disagree with node 1", id, n.Peers, n.Protocol)
		}
		for pid, addr := range n.Peers {
			if addr != nodes[1].Peers[pid] {
				t.Errorf("node %d names peer %d %s, node 1 names it %s", id, pid, addr, nodes[1].Peers[pid])
			}
		}
	}
	// the settings docs/configuration.md asks of every PostgreSQL server
	for _, setting := range []string{"wal_level=logical", "max_prepared_transactions=", "max_replication_slots=", "max_wal_senders="} {
		if !strings.Contains(compose.Postgres.Command, setting) {
			t.Errorf("the compose PostgreSQL servers are not started with %s", setting)
		}
	}
	script := fmt.Sprint(compose.Services["certs"].Command)
	srvCert, srvKey := certs.ServerFiles("clients")
	if n := nodes[1]; n != nil && (filepath.Base(n.TLS.CertFile) != srvCert || filepath.Base(n.TLS.KeyFile) != srvKey) {
		t.Errorf("node 1's client certificate is %s, not the %s the certs service makes", n.TLS.CertFile, srvCert)
	}
	for _, want := range []string{"ordo cert create-ca --dir /ca", "ordo cert create-node --dir /ca --id $$i", "for i in 1 2 3",
		"ordo cert create-client --dir /ca --name admin", "ordo cert create-server --dir /ca --name clients",
		"--host localhost", "--host ordo1 --host ordo2 --host ordo3",
		"/ca/node-$$i.key /ca/client-admin.crt /ca/client-admin.key", "/ca/" + srvCert + " /ca/" + srvKey + " /certs$$i/", "chown -R 10001:10001"} {
		if !strings.Contains(script, want) {
			t.Errorf("the certs service's script does not run %q: %s", want, script)
		}
	}
}

// requireAdmin fails unless node n serves its admin API where ordoctl can
// reach it from elsewhere (a fixed, non-loopback admin_listen), with
// client certificates of the peer CA (config.Parse already refuses an
// anonymous admin API).
func requireAdmin(t *testing.T, where string, n *config.Node) {
	t.Helper()
	if n.AdminListen == config.DefaultAdminListen || config.Loopback(n.AdminListen) || port(t, n.AdminListen) == "0" {
		t.Errorf("%s: node %d's admin_listen %q: a deployment names a fixed port other hosts reach", where, n.ID, n.AdminListen)
	}
	if n.PeerTLS.CertFile == "" || n.AdminToken != "" || n.AdminTokenFile != "" {
		t.Errorf("%s: node %d's admin API is not authenticated by client certificates", where, n.ID)
	}
}

func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%q: %v", addr, err)
	}
	return p
}

func itoa(id uint32) string {
	return string(rune('0' + id)) // ids 1…9 here
}

// TestPrometheusConfigs checks both scrape configurations: they load the
// alert rules, scrape three nodes with a node label, and the rules parse.
func TestPrometheusConfigs(t *testing.T) {
	for _, path := range []string{"prometheus/prometheus.yml", "compose/prometheus.yml"} {
		var cfg struct {
			RuleFiles     []string `yaml:"rule_files"`
			ScrapeConfigs []struct {
				JobName       string `yaml:"job_name"`
				StaticConfigs []struct {
					Targets []string          `yaml:"targets"`
					Labels  map[string]string `yaml:"labels"`
				} `yaml:"static_configs"`
			} `yaml:"scrape_configs"`
		}
		readYAML(t, path, &cfg)
		if len(cfg.RuleFiles) != 1 || cfg.RuleFiles[0] != "ordo-alerts.yml" {
			t.Errorf("%s: rule_files %v, want [ordo-alerts.yml]", path, cfg.RuleFiles)
		}
		if len(cfg.ScrapeConfigs) != 1 || cfg.ScrapeConfigs[0].JobName != "ordo" || len(cfg.ScrapeConfigs[0].StaticConfigs) != 3 {
			t.Fatalf("%s: want one job \"ordo\" with three targets", path)
		}
		for i, sc := range cfg.ScrapeConfigs[0].StaticConfigs {
			if len(sc.Targets) != 1 || sc.Labels["node"] != itoa(uint32(i+1)) {
				t.Errorf("%s: target %d: %v %v, want one target labelled node=%d", path, i+1, sc.Targets, sc.Labels, i+1)
			}
		}
	}
	for _, r := range AlertRules(t) {
		if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
			t.Errorf("alert rule %+v lacks a name, expr, severity or summary", r)
		}
		if strings.Count(r.Expr, "(") != strings.Count(r.Expr, ")") {
			t.Errorf("alert %s: unbalanced parentheses in %s", r.Alert, r.Expr)
		}
	}
}

// Rule is one alerting rule of prometheus/ordo-alerts.yml.
type Rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// AlertRules reads the alert rules.
func AlertRules(t *testing.T) []Rule {
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []Rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, "prometheus/ordo-alerts.yml", &f)
	var rules []Rule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatal("no alert rules")
	}
	return rules
}

// TestGrafanaDashboard checks the dashboard's structure: every panel uses
// the provisioned data source, ids are unique, panels do not overlap, and
// every query is a non-empty PromQL expression over ordo_ metrics.
func TestGrafanaDashboard(t *testing.T) {
	var ds struct {
		Datasources []struct {
			UID string `yaml:"uid"`
		} `yaml:"datasources"`
	}
	readYAML(t, "grafana/provisioning/datasources/prometheus.yml", &ds)
	var prov struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, "grafana/provisioning/dashboards/ordo.yml", &prov)
	if len(ds.Datasources) != 1 || len(prov.Providers) != 1 {
		t.Fatal("want one data source and one dashboard provider")
	}
	b, err := os.ReadFile("grafana/dashboards/ordo.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string  `json:"uid"`
		Panels []Panel `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || len(d.Panels) < 10 {
		t.Fatalf("dashboard uid %q with %d panels", d.UID, len(d.Panels))
	}
	ids := map[int]bool{}
	type cell struct{ x, y int }
	taken := map[cell]int{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
			for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
				if other, ok := taken[cell{x, y}]; ok {
					t.Errorf("panel %q overlaps panel id %d at %d,%d", p.Title, other, x, y)
				}
				taken[cell{x, y}] = p.ID
			}
		}
		if p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q is wider than the grid", p.Title)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != ds.Datasources[0].UID {
			t.Errorf("panel %q uses data source %q, not the provisioned %q", p.Title, p.Datasource.UID, ds.Datasources[0].UID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if len(MetricNames(q.Expr)) == 0 || strings.Count(q.Expr, "(") != strings.Count(q.Expr, ")") {
				t.Errorf("panel %q: query %q uses no ordo_ metric or is unbalanced", p.Title, q.Expr)
			}
		}
	}
}

// Panel is the part of a Grafana panel the tests read.
type Panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ X, Y, W, H int } `json:"gridPos"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// TestKubernetesManifest renders the node configuration of each pod the
// way the init container does and loads it with Ordo's own loader, and
// checks the pod's PostgreSQL settings and the objects the manifest names.
func TestKubernetesManifest(t *testing.T) {
	b, err := os.ReadFile("kubernetes/ordo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	kinds := map[string]map[string]any{}
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			if err.Error() == "EOF" {
				break
			}
			t.Fatal(err)
		}
		name := doc["metadata"].(map[string]any)["name"].(string)
		kinds[doc["kind"].(string)+"/"+name] = doc
	}
	for _, want := range []string{"Secret/ordo-postgres", "ConfigMap/ordo-config", "Service/ordo-peers", "Service/ordo", "StatefulSet/ordo"} {
		if kinds[want] == nil {
			t.Errorf("the manifest has no %s", want)
		}
	}
	cm := kinds["ConfigMap/ordo-config"]
	tmpl := cm["data"].(map[string]any)["node.yaml.in"].(string)
	sts := kinds["StatefulSet/ordo"]
	spec := sts["spec"].(map[string]any)
	replicas := spec["replicas"].(int)
	service := spec["serviceName"].(string)
	peerTLSDirs, peerTLSFiles := map[string]bool{}, map[string]bool{}
	clientTLSDirs, clientTLSFiles := map[string]bool{}, map[string]bool{}
	var metricsPort, adminPort string
	for ordinal := 0; ordinal < replicas; ordinal++ {
		path := filepath.Join(t.TempDir(), "node.yaml")
		if err := os.WriteFile(path, []byte(strings.ReplaceAll(tmpl, "@ID@", itoa(uint32(ordinal+1)))), 0o600); err != nil {
			t.Fatal(err)
		}
		n, err := config.Parse(path)
		if err != nil {
			t.Fatalf("pod ordo-%d: %v", ordinal, err)
		}
		requirePeerTLS(t, fmt.Sprintf("pod ordo-%d", ordinal), n)
		requireClientTLS(t, fmt.Sprintf("pod ordo-%d", ordinal), n)
		requireAdmin(t, fmt.Sprintf("pod ordo-%d", ordinal), n)
		clientTLSDirs[filepath.Dir(n.TLS.CertFile)] = true
		clientTLSFiles[filepath.Base(n.TLS.CertFile)], clientTLSFiles[filepath.Base(n.TLS.KeyFile)] = true, true
		metricsPort, adminPort = port(t, n.MetricsListen), port(t, n.AdminListen)
		peerTLSDirs[filepath.Dir(n.PeerTLS.CertFile)] = true
		for _, f := range []string{n.PeerTLS.CertFile, n.PeerTLS.KeyFile, n.PeerTLS.CAFile} {
			peerTLSFiles[filepath.Base(f)] = true
		}
		if len(n.Peers) != replicas {
			t.Errorf("pod ordo-%d names %d peers for %d replicas", ordinal, len(n.Peers), replicas)
		}
		if want := "ordo-" + itoa(uint32(ordinal)) + "." + service + ":7001"; n.Peers[n.ID] != want {
			t.Errorf("pod ordo-%d (node %d) is peer %s, want %s", ordinal, n.ID, n.Peers[n.ID], want)
		}
	}
	pod := spec["template"].(map[string]any)["spec"].(map[string]any)
	checkOrdoContainer(t, pod, metricsPort, adminPort)
	var peerPorts []string
	for _, p := range kinds["Service/ordo-peers"]["spec"].(map[string]any)["ports"].([]any) {
		peerPorts = append(peerPorts, fmt.Sprint(p.(map[string]any)["port"]))
	}
	if !slices.Contains(peerPorts, adminPort) {
		t.Errorf("Service ordo-peers ports %v: no admin port %s (ordo-N.ordo-peers:%s for ordoctl)", peerPorts, adminPort, adminPort)
	}
	var pgArgs string
	for _, c := range pod["containers"].([]any) {
		c := c.(map[string]any)
		if c["name"] == "postgres" {
			for _, a := range c["args"].([]any) {
				pgArgs += a.(string) + " "
			}
		}
	}
	for _, setting := range []string{"wal_level=logical", "max_prepared_transactions=", "max_replication_slots=", "max_wal_senders="} {
		if !strings.Contains(pgArgs, setting) {
			t.Errorf("the pod's PostgreSQL is not started with %s", setting)
		}
	}

	// The Raft log volume is writable by the image's user: the pod's
	// fsGroup and the ordo container's user are the Dockerfile's uid/gid.
	docker, err := os.ReadFile("docker/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`--uid (\d+) --gid (\d+)`).FindStringSubmatch(string(docker))
	if m == nil {
		t.Fatal("the Dockerfile does not create its user with a fixed --uid and --gid")
	}
	sc, _ := pod["securityContext"].(map[string]any)
	if sc == nil || fmt.Sprint(sc["fsGroup"]) != m[2] {
		t.Errorf("pod securityContext %v: want fsGroup %s", sc, m[2])
	}
	for _, c := range pod["containers"].([]any) {
		c := c.(map[string]any)
		if c["name"] != "ordo" {
			continue
		}
		csc, _ := c["securityContext"].(map[string]any)
		if csc == nil || fmt.Sprint(csc["runAsUser"]) != m[1] || fmt.Sprint(csc["runAsGroup"]) != m[2] {
			t.Errorf("ordo container securityContext %v: want runAsUser %s, runAsGroup %s", csc, m[1], m[2])
		}
	}
	checkPeerTLSVolume(t, pod, peerTLSDirs, peerTLSFiles)
	checkClientTLSVolume(t, pod, clientTLSDirs, clientTLSFiles)

	// Scraped once per pod, not also through the client Service.
	if ann, _ := kinds["Service/ordo"]["metadata"].(map[string]any)["annotations"].(map[string]any); ann["prometheus.io/scrape"] != nil {
		t.Error("the client Service is annotated for scraping: every node would be scraped twice")
	}
	podAnn, _ := spec["template"].(map[string]any)["metadata"].(map[string]any)["annotations"].(map[string]any)
	if podAnn["prometheus.io/scrape"] != "true" {
		t.Error("the pods are not annotated for scraping")
	}
}

// checkPeerTLSVolume: the directory the rendered configurations name is
// mounted in the ordo container from a projected volume of Secrets that
// holds every file they name; and cert-manager.yaml makes each of those
// Secrets with a certificate naming the node id whose files it provides.
func checkPeerTLSVolume(t *testing.T, pod map[string]any, dirs, files map[string]bool) {
	t.Helper()
	if len(dirs) != 1 {
		t.Fatalf("the pods' peer TLS files are in %d directories, want one: %v", len(dirs), dirs)
	}
	var volume string
	for _, c := range pod["containers"].([]any) {
		c := c.(map[string]any)
		if c["name"] != "ordo" {
			continue
		}
		for _, m := range c["volumeMounts"].([]any) {
			m := m.(map[string]any)
			if dirs[m["mountPath"].(string)] {
				volume = m["name"].(string)
			}
		}
	}
	if volume == "" {
		t.Fatalf("no volume is mounted at the peer TLS directory %v in the ordo container", dirs)
	}
	secretOf := map[string]string{} // file name -> Secret
	for _, v := range pod["volumes"].([]any) {
		v := v.(map[string]any)
		if v["name"] != volume {
			continue
		}
		projected, _ := v["projected"].(map[string]any)
		if projected == nil {
			t.Fatalf("volume %s is not projected from Secrets", volume)
		}
		for _, src := range projected["sources"].([]any) {
			sec := src.(map[string]any)["secret"].(map[string]any)
			for _, it := range sec["items"].([]any) {
				secretOf[it.(map[string]any)["path"].(string)] = sec["name"].(string)
			}
		}
	}
	for f := range files {
		if secretOf[f] == "" {
			t.Errorf("the peer TLS volume %s does not provide %s", volume, f)
		}
	}

	// cert-manager.yaml issues those Secrets, each for the right node id.
	b, err := os.ReadFile("kubernetes/cert-manager.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	issued := map[string]map[string]any{} // Secret -> Certificate spec
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			if err.Error() == "EOF" {
				break
			}
			t.Fatal(err)
		}
		if doc["kind"] == "Certificate" {
			spec := doc["spec"].(map[string]any)
			issued[spec["secretName"].(string)] = spec
		}
	}
	for f, secret := range secretOf {
		var id uint64
		if _, err := fmt.Sscanf(f, "node-%d.crt", &id); err != nil {
			continue
		}
		spec := issued[secret]
		if spec == nil {
			t.Errorf("cert-manager.yaml issues no certificate into Secret %s (node %d)", secret, id)
			continue
		}
		if uris := fmt.Sprint(spec["uris"]); uris != fmt.Sprint([]any{certs.NodeURI(id).String()}) {
			t.Errorf("Secret %s (node %d) is issued with uris %s, want [%s]", secret, id, uris, certs.NodeURI(id))
		}
		if usages := fmt.Sprint(spec["usages"]); !strings.Contains(usages, "server auth") || !strings.Contains(usages, "client auth") {
			t.Errorf("Secret %s: usages %s: a node both accepts and dials peers", secret, usages)
		}
	}
	// and a client certificate for ordoctl, naming no node
	if spec := issued["ordo-admin-tls"]; spec == nil {
		t.Error("cert-manager.yaml issues no admin client certificate (Secret ordo-admin-tls)")
	} else if usages := fmt.Sprint(spec["usages"]); !strings.Contains(usages, "client auth") || strings.Contains(usages, "server auth") || spec["uris"] != nil {
		t.Errorf("Secret ordo-admin-tls: usages %s, uris %v: a client certificate naming no node", usages, spec["uris"])
	}
}

// checkClientTLSVolume: the directory of the client certificate the
// rendered configurations name is mounted in the ordo container from a
// Secret that holds both files, and cert-manager.yaml issues that Secret
// as a server certificate for the Service clients connect to.
func checkClientTLSVolume(t *testing.T, pod map[string]any, dirs, files map[string]bool) {
	t.Helper()
	if len(dirs) != 1 {
		t.Fatalf("the pods' client TLS files are in %d directories, want one: %v", len(dirs), dirs)
	}
	var volume string
	for _, c := range pod["containers"].([]any) {
		c := c.(map[string]any)
		if c["name"] != "ordo" {
			continue
		}
		for _, m := range c["volumeMounts"].([]any) {
			m := m.(map[string]any)
			if dirs[m["mountPath"].(string)] {
				volume = m["name"].(string)
			}
		}
	}
	if volume == "" {
		t.Fatalf("no volume is mounted at the client TLS directory %v in the ordo container", dirs)
	}
	var secret string
	for _, v := range pod["volumes"].([]any) {
		v := v.(map[string]any)
		if v["name"] != volume {
			continue
		}
		sec, _ := v["secret"].(map[string]any)
		if sec == nil {
			t.Fatalf("volume %s is not a Secret", volume)
		}
		secret = sec["secretName"].(string)
		paths := map[string]bool{}
		for _, it := range sec["items"].([]any) {
			paths[it.(map[string]any)["path"].(string)] = true
		}
		for f := range files {
			if !paths[f] {
				t.Errorf("the client TLS volume %s does not provide %s", volume, f)
			}
		}
	}
	b, err := os.ReadFile("kubernetes/cert-manager.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			if err.Error() == "EOF" {
				break
			}
			t.Fatal(err)
		}
		spec, _ := doc["spec"].(map[string]any)
		if doc["kind"] != "Certificate" || spec["secretName"] != secret {
			continue
		}
		if usages := fmt.Sprint(spec["usages"]); !strings.Contains(usages, "server auth") || strings.Contains(usages, "client auth") || spec["uris"] != nil {
			t.Errorf("Secret %s: usages %s, uris %v: a server certificate naming no node", secret, usages, spec["uris"])
		}
		if names := fmt.Sprint(spec["dnsNames"]); !strings.Contains(names, "ordo ") && !strings.HasPrefix(names, "[ordo ") {
			t.Errorf("Secret %s: dnsNames %s do not name the Service ordo", secret, names)
		}
		return
	}
	t.Errorf("cert-manager.yaml issues no certificate into Secret %s (client TLS)", secret)
}

// checkOrdoContainer: the ordo container exposes the metrics and admin
// ports of its configuration, and its readiness probe is /readyz on the
// metrics port (a node that cannot commit leaves the Service), with a
// timeout longer than the check's 2s quorum bound.
func checkOrdoContainer(t *testing.T, pod map[string]any, metricsPort, adminPort string) {
	t.Helper()
	for _, c := range pod["containers"].([]any) {
		c := c.(map[string]any)
		if c["name"] != "ordo" {
			continue
		}
		ports := map[string]string{} // name -> containerPort
		for _, p := range c["ports"].([]any) {
			p := p.(map[string]any)
			ports[fmt.Sprint(p["name"])] = fmt.Sprint(p["containerPort"])
		}
		if ports["metrics"] != metricsPort || ports["admin"] != adminPort {
			t.Errorf("ordo container ports %v: want metrics %s and admin %s as configured", ports, metricsPort, adminPort)
		}
		probe, _ := c["readinessProbe"].(map[string]any)
		get, _ := probe["httpGet"].(map[string]any)
		if get == nil || get["path"] != "/readyz" || (fmt.Sprint(get["port"]) != "metrics" && fmt.Sprint(get["port"]) != metricsPort) {
			t.Errorf("ordo readinessProbe %v: want httpGet /readyz on the metrics port", probe)
		}
		if to, _ := probe["timeoutSeconds"].(int); to < 3 {
			t.Errorf("ordo readinessProbe timeoutSeconds %v: /readyz may take 2s to find no quorum; give it 3s or more", probe["timeoutSeconds"])
		}
		return
	}
	t.Error("no ordo container")
}

// TestKubernetesScrapeConfig: the Kubernetes scrape job keeps the Ordo
// pods' metrics port and gives each target the node label the dashboard
// groups by.
func TestKubernetesScrapeConfig(t *testing.T) {
	var cfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName      string `yaml:"job_name"`
			KubernetesSD []struct {
				Role string `yaml:"role"`
			} `yaml:"kubernetes_sd_configs"`
			Relabel []struct {
				SourceLabels []string `yaml:"source_labels"`
				Regex        string   `yaml:"regex"`
				Action       string   `yaml:"action"`
				TargetLabel  string   `yaml:"target_label"`
			} `yaml:"relabel_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, "prometheus/kubernetes.yml", &cfg)
	if len(cfg.RuleFiles) != 1 || cfg.RuleFiles[0] != "ordo-alerts.yml" {
		t.Errorf("rule_files %v, want [ordo-alerts.yml]", cfg.RuleFiles)
	}
	if len(cfg.ScrapeConfigs) != 1 || cfg.ScrapeConfigs[0].JobName != "ordo" || len(cfg.ScrapeConfigs[0].KubernetesSD) != 1 || cfg.ScrapeConfigs[0].KubernetesSD[0].Role != "pod" {
		t.Fatalf("want one job \"ordo\" discovering pods: %+v", cfg.ScrapeConfigs)
	}
	var keepsApp, keepsPort, labelsNode bool
	for _, r := range cfg.ScrapeConfigs[0].Relabel {
		switch {
		case r.Action == "keep" && len(r.SourceLabels) > 0 && r.SourceLabels[0] == "__meta_kubernetes_pod_label_app" && strings.HasPrefix(r.Regex, "ordo;"):
			keepsApp = true
		case r.Action == "keep" && len(r.SourceLabels) == 1 && r.SourceLabels[0] == "__meta_kubernetes_pod_container_port_name" && r.Regex == "metrics":
			keepsPort = true
		case r.TargetLabel == "node" && len(r.SourceLabels) == 1 && r.SourceLabels[0] == "__meta_kubernetes_pod_name":
			labelsNode = true
		}
	}
	if !keepsApp || !keepsPort || !labelsNode {
		t.Errorf("relabeling: keeps app=ordo %v, keeps the metrics port %v, labels node %v", keepsApp, keepsPort, labelsNode)
	}
}
