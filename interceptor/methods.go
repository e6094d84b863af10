package interceptor

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/suggest"
)

// known is what the server interceptors know of the methods they may serve: every
// method of every service of the protobuf registry, and the services named by
// WithUnregisteredServices, whose methods are unknown.
type known struct {
	methods      []string        // full method names of the registry, sorted
	services     map[string]bool // services of the registry, by full name
	unregistered []string        // services named by WithUnregisteredServices
}

// knownMethods lists the methods of files and the services named unregistered.
func knownMethods(files *protoregistry.Files, unregistered []string) *known {
	k := &known{services: make(map[string]bool), unregistered: unregistered}
	files.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		for i := 0; i < fd.Services().Len(); i++ {
			sd := fd.Services().Get(i)
			k.services[string(sd.FullName())] = true
			for j := 0; j < sd.Methods().Len(); j++ {
				k.methods = append(k.methods, "/"+string(sd.FullName())+"/"+string(sd.Methods().Get(j).Name()))
			}
		}
		return true
	})
	slices.Sort(k.methods)
	return k
}

// check reports why a rule's Method (a full method name or a pattern) can match no
// method the server may serve, suggesting the closest one, or "".
func (k *known) check(method string) string {
	if method == "*" {
		return ""
	}
	if strings.HasSuffix(method, "*") {
		return k.checkPattern(strings.TrimSuffix(method, "*"))
	}
	svc, name, _ := strings.Cut(method[1:], "/")
	if slices.Contains(k.unregistered, svc) {
		return ""
	}
	if _, found := slices.BinarySearch(k.methods, method); found {
		return ""
	}
	var problem string
	if k.services[svc] {
		problem = fmt.Sprintf("service %s has no method %q", svc, name)
	} else {
		problem = fmt.Sprintf("no service %s in the protobuf registry", svc)
	}
	if alt := suggest.Closest(method, k.methods); alt != "" {
		problem += fmt.Sprintf("; did you mean %q?", alt)
	}
	if !k.services[svc] {
		problem += "; a service without descriptors there (a hand-written grpc.ServiceDesc) must be named with WithUnregisteredServices"
	}
	return problem
}

// checkPattern checks the pattern prefix + "*".
func (k *known) checkPattern(prefix string) string {
	i, _ := slices.BinarySearch(k.methods, prefix)
	if i < len(k.methods) && strings.HasPrefix(k.methods[i], prefix) {
		return ""
	}
	for _, svc := range k.unregistered {
		all := "/" + svc + "/"
		if strings.HasPrefix(all, prefix) || strings.HasPrefix(prefix, all) {
			return ""
		}
	}
	problem := fmt.Sprintf("pattern %q matches no method of the protobuf registry", prefix+"*")
	svcs := make([]string, 0, len(k.services))
	for svc := range k.services {
		svcs = append(svcs, "/"+svc+"/")
	}
	slices.Sort(svcs)
	if alt := suggest.Closest(prefix, svcs); alt != "" {
		problem += fmt.Sprintf("; did you mean %q?", alt+"*")
	}
	return problem + "; a service without descriptors there (a hand-written grpc.ServiceDesc) must be named with WithUnregisteredServices"
}

// checkUnregistered checks the names given to WithUnregisteredServices.
func checkUnregistered(names []string) error {
	for _, n := range names {
		if n == "" || strings.ContainsAny(n, "/*") {
			return fmt.Errorf("interceptor: %w", &guard.ConfigError{Field: "WithUnregisteredServices",
				Reason: fmt.Sprintf("%q is not a service's full name, as in \"pkg.v1.Service\"", n)})
		}
	}
	return nil
}

// errLocksNothing is the error of a server interceptor with no rule and no annotated
// method: every RPC would run unlocked.
func errLocksNothing(protoOptions bool) error {
	reason := "the interceptor locks nothing: give it rules (WithRules), or declare locks in .proto files and read them with WithProtoOptions"
	if protoOptions {
		reason = "the interceptor locks nothing: no rules (WithRules), and WithProtoOptions found no method with the " + optionName + " option in the registry"
	}
	return fmt.Errorf("interceptor: %w", &guard.ConfigError{Field: "WithRules", Reason: reason})
}
