package kube

import (
	"context"
	"os"
	"regexp"
	"slices"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/virga-ml/virga"
)

// TestRoleCoversTheBackend plays every path that calls the API (starts of
// one node and of a gang, a failed gang create, a stop, a broken gang, the
// deletion of finished pods, an adoption) and checks that the Role shipped
// in deploy/kubernetes/rbac.yaml allows each call, and grants nothing the
// backend does not call.
func TestRoleCoversTheBackend(t *testing.T) {
	data, err := os.ReadFile("../../../deploy/kubernetes/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var role *rbacv1.Role
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := obj.(*rbacv1.Role); ok {
			role = r
		}
	}
	if role == nil {
		t.Fatal("no Role in rbac.yaml")
	}

	c := newCluster(t)
	c.failCreate = 4
	b := c.backend(Config{FinishedTTL: time.Millisecond})
	ctx := context.Background()
	if err := b.Start(ctx, startSpec(1)); err != nil { // create 1
		t.Fatal(err)
	}
	g := startSpec(2)
	g.Nodes = 2
	if err := b.Start(ctx, g); err != nil { // creates 2, 3 and the service
		t.Fatal(err)
	}
	g = startSpec(3)
	g.Nodes = 2
	if err := b.Start(ctx, g); err == nil { // create 4 fails: rank 0 is deleted
		t.Fatal("the failing create succeeded")
	}
	c.run("virga-1-0")
	next(t, b)
	c.exit("virga-1-0", 0) // deleted after the TTL
	next(t, b)
	c.run("virga-2-0")
	c.run("virga-2-1")
	next(t, b)
	c.exit("virga-2-1", 1) // rank 0 deleted
	next(t, b)
	if err := b.Start(ctx, startSpec(4)); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(4, time.Second); err != nil {
		t.Fatal(err)
	}
	next(t, b)
	b2 := c.backend(Config{})
	if err := b2.Adopt(ctx, &virga.Attempt{ID: 1}, virga.Resources{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "finished pods deleted", func() bool { return !c.exists("virga-1-0") })

	used := map[string]bool{}
	for _, a := range c.cs.Actions() {
		res, verb := a.GetResource().Resource, a.GetVerb()
		used[res+" "+verb] = true
		if a.GetNamespace() != c.ns {
			t.Errorf("%s %s outside the namespace (%q)", verb, res, a.GetNamespace())
		}
		ok := false
		for _, r := range role.Rules {
			if slices.Contains(r.APIGroups, a.GetResource().Group) && slices.Contains(r.Resources, res) && slices.Contains(r.Verbs, verb) {
				ok = true
			}
		}
		if !ok {
			t.Errorf("the Role does not allow %s %s", verb, res)
		}
	}
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			for _, v := range r.Verbs {
				if !used[res+" "+v] {
					t.Errorf("the Role grants %s %s, which the backend never calls", v, res)
				}
			}
		}
	}
}
