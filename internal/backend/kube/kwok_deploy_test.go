package kube

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// TestKWOKDeployManifests applies deploy/kubernetes as kubectl apply -k
// would (each resource of kustomization.yaml, in the namespace it sets) to
// the real API server, with strict field validation: a field the API does
// not know, a wrong type or a missing required field fails. The namespace
// is the test's own (as kustomize's namespace does, the RoleBinding's
// subjects follow), and namespace.yaml is only validated (dry run). Then
// every name the server's Deployment refers to (service account, config
// map, secrets, claim) must be an object the manifests created.
func TestKWOKDeployManifests(t *testing.T) {
	admin, ns := kwokNamespace(t)
	ctx := context.Background()
	dir := "../../../deploy/kubernetes"
	var kust struct {
		Namespace string   `json:"namespace"`
		Resources []string `json:"resources"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &kust); err != nil {
		t.Fatalf("deploy/kubernetes/kustomization.yaml: %v", err)
	}
	if len(kust.Resources) == 0 {
		t.Fatal("deploy/kubernetes/kustomization.yaml lists no resources")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(admin.Discovery()))

	created := map[string]bool{} // "Kind/name"
	for _, file := range kust.Resources {
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var obj unstructured.Unstructured
			if err := dec.Decode(&obj.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("deploy/kubernetes/%s: %v", file, err)
			}
			if obj.Object == nil {
				continue
			}
			gvk := obj.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				t.Fatalf("deploy/kubernetes/%s: %s %s: %v", file, gvk, obj.GetName(), err)
			}
			opts := metav1.CreateOptions{FieldValidation: "Strict"}
			var res dynamic.ResourceInterface = dyn.Resource(m.Resource)
			if m.Scope.Name() == "namespace" {
				if obj.GetNamespace() != "" && obj.GetNamespace() != kust.Namespace {
					t.Errorf("deploy/kubernetes/%s: %s %s in namespace %q, the kustomization's is %q", file,
						gvk.Kind, obj.GetName(), obj.GetNamespace(), kust.Namespace)
				}
				obj.SetNamespace(ns)
				res = dyn.Resource(m.Resource).Namespace(ns)
			} else {
				opts.DryRun = []string{metav1.DryRunAll}
			}
			if gvk.Kind == "RoleBinding" {
				subjects, _, _ := unstructured.NestedSlice(obj.Object, "subjects")
				for _, s := range subjects {
					s.(map[string]any)["namespace"] = ns
				}
				_ = unstructured.SetNestedSlice(obj.Object, subjects, "subjects")
			}
			if _, err := res.Create(ctx, &obj, opts); err != nil {
				t.Errorf("deploy/kubernetes/%s: %s %s: %v", file, gvk.Kind, obj.GetName(), err)
				continue
			}
			created[gvk.Kind+"/"+obj.GetName()] = true
		}
	}

	deps, err := admin.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(deps.Items) == 0 {
		t.Fatal("deploy/kubernetes made no Deployment")
	}
	for _, d := range deps.Items {
		for _, ref := range refsOf(&d) {
			if !created[ref] {
				t.Errorf("Deployment %s refers to %s, which deploy/kubernetes does not make (it makes %v)", d.Name, ref,
					keys(created))
			}
		}
	}
}

// refsOf returns the objects ("Kind/name") d's pods need: its service
// account, and the config maps, secrets and claims of its volumes and
// environment.
func refsOf(d *appsv1.Deployment) []string {
	spec := d.Spec.Template.Spec
	sa := spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	refs := []string{"ServiceAccount/" + sa}
	for _, v := range spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			refs = append(refs, "ConfigMap/"+v.ConfigMap.Name)
		case v.Secret != nil:
			refs = append(refs, "Secret/"+v.Secret.SecretName)
		case v.PersistentVolumeClaim != nil:
			refs = append(refs, "PersistentVolumeClaim/"+v.PersistentVolumeClaim.ClaimName)
		}
	}
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil && (r.Optional == nil || !*r.Optional) {
				refs = append(refs, "Secret/"+r.Name)
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil && (r.Optional == nil || !*r.Optional) {
				refs = append(refs, "ConfigMap/"+r.Name)
			}
		}
	}
	return refs
}

func keys(m map[string]bool) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return strings.Join(ks, ", ")
}
