// Package deploy holds Virga's deployment files; its test checks that the
// Kubernetes manifests decode as the API server's own types.
package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// decodeAll decodes every document of every manifest under kubernetes/
// except the kustomization.
func decodeAll(t *testing.T) map[string][]runtime.Object {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	out := map[string][]runtime.Object{}
	dec := scheme.Codecs.UniversalDeserializer()
	sep := regexp.MustCompile(`(?m)^---\s*$`)
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range sep.Split(string(data), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			obj, gvk, err := dec.Decode([]byte(doc), nil, nil)
			if err != nil {
				t.Fatalf("%s, document %d: %v", f, i+1, err)
			}
			// Strict: no field the type does not know (the API server would
			// drop a misspelt one silently).
			if err := yaml.UnmarshalStrict([]byte(doc), obj.DeepCopyObject()); err != nil {
				t.Errorf("%s, document %d (%s): %v", f, i+1, gvk.Kind, err)
			}
			out[gvk.Kind] = append(out[gvk.Kind], obj)
		}
	}
	return out
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func TestManifestsDecode(t *testing.T) {
	objs := decodeAll(t)
	for _, kind := range []string{"Namespace", "ServiceAccount", "Role", "RoleBinding", "Secret", "StatefulSet",
		"Service", "ConfigMap", "PersistentVolumeClaim", "Deployment"} {
		if len(objs[kind]) == 0 {
			t.Errorf("no %s", kind)
		}
	}
	for kind, list := range objs {
		for _, o := range list {
			m := o.(interface{ GetNamespace() string })
			if kind != "Namespace" && m.GetNamespace() != "virga" {
				t.Errorf("%s in namespace %q", kind, m.GetNamespace())
			}
		}
	}
	d := objs["Deployment"][0].(*appsv1.Deployment)
	if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("server: replicas %d strategy %q; one server per data directory, replaced with Recreate", *d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	c := d.Spec.Template.Spec.Containers[0]
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"server", "--db=postgres://", "--listen=0.0.0.0:7070", "--capacity=/etc/virga/capacity.yaml", "--data-dir=/data"} {
		if !strings.Contains(args, want) {
			t.Errorf("server args %q lack %q", args, want)
		}
	}
	if d.Spec.Template.Spec.ServiceAccountName != "virga" {
		t.Errorf("server service account %q", d.Spec.Template.Spec.ServiceAccountName)
	}
	if sc := d.Spec.Template.Spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Error("the server may run as root")
	}
	var svc *corev1.Service
	for _, o := range objs["Service"] {
		if s := o.(*corev1.Service); s.Name == "virga" {
			svc = s
		}
	}
	if svc == nil || svc.Spec.Ports[0].Port != 7070 || svc.Spec.Selector["app.kubernetes.io/component"] != "server" {
		t.Errorf("the server's Service: %+v", svc)
	}
	// The capacity file mounted is the ConfigMap's.
	cm := objs["ConfigMap"][0].(*corev1.ConfigMap)
	if !strings.Contains(cm.Data["capacity.yaml"], "backend: kubernetes") {
		t.Errorf("capacity ConfigMap: %v", cm.Data)
	}
	ss := objs["StatefulSet"][0].(*appsv1.StatefulSet)
	if len(ss.Spec.VolumeClaimTemplates) != 1 {
		t.Error("PostgreSQL has no persistent volume")
	}
}

// TestRoleIsNamespacedAndSmall checks the Role grants only what
// internal/backend/kube uses (its own test checks the backend's calls
// against this Role).
func TestRoleIsNamespacedAndSmall(t *testing.T) {
	objs := decodeAll(t)
	if len(objs["ClusterRole"]) > 0 || len(objs["ClusterRoleBinding"]) > 0 {
		t.Error("cluster-wide RBAC")
	}
	role := objs["Role"][0].(*rbacv1.Role)
	allowed := map[string][]string{"pods": {"create", "delete", "list", "watch"}, "services": {"create"}}
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			for _, v := range r.Verbs {
				if !slices.Contains(allowed[res], v) || !slices.Equal(r.APIGroups, []string{""}) {
					t.Errorf("the Role grants %s %v/%s", v, r.APIGroups, res)
				}
			}
		}
	}
}

func TestKustomizationListsEveryManifest(t *testing.T) {
	data, err := os.ReadFile("kubernetes/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Namespace string   `json:"namespace"`
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("kubernetes/*.yaml")
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" && !slices.Contains(k.Resources, b) {
			t.Errorf("%s is not in kustomization.yaml", b)
		}
	}
	for _, r := range k.Resources {
		if _, err := os.Stat(filepath.Join("kubernetes", r)); err != nil {
			t.Error(err)
		}
	}
}

func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for _, want := range []string{"CGO_ENABLED=0", "-tags kubernetes,cloud", "./cmd/virga", "USER 65532", "AS build", "COPY --from=build"} {
		if !strings.Contains(s, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}
