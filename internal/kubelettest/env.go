//go:build !windows

package kubelettest

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// defaultPath is the PATH of a container whose image sets none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// configError is a container's configuration the kubelet cannot resolve
// yet (a missing Secret, ConfigMap or key): the container waits with
// reason CreateContainerConfigError and the kubelet tries again.
type configError struct{ msg string }

func (e *configError) Error() string { return e.msg }

func configErrorf(format string, args ...any) error {
	return &configError{msg: fmt.Sprintf(format, args...)}
}

// envList is an environment in order, a later value of a name replacing
// the earlier one in place.
type envList struct {
	names []string
	value map[string]string
}

func (l *envList) set(k, v string) {
	if l.value == nil {
		l.value = map[string]string{}
	}
	if _, ok := l.value[k]; !ok {
		l.names = append(l.names, k)
	}
	l.value[k] = v
}

func (l *envList) list() []string {
	out := make([]string, 0, len(l.names))
	for _, k := range l.names {
		out = append(out, k+"="+l.value[k])
	}
	return out
}

// containerEnv resolves a container's environment as a kubelet does:
// the defaults and Options.Env, then envFrom, then env, whose values may
// refer to earlier variables as $(NAME).
func (r *podRun) containerEnv(ctx context.Context, pod *corev1.Pod, c *corev1.Container) (*envList, error) {
	l := &envList{}
	l.set("PATH", defaultPath)
	l.set("HOSTNAME", pod.Name)
	l.set("HOME", r.homeDir())
	for _, kv := range r.k.opts.Env {
		k, v, _ := strings.Cut(kv, "=")
		l.set(k, v)
	}
	secrets := map[string]*corev1.Secret{}
	configMaps := map[string]*corev1.ConfigMap{}
	getSecret := func(name string) (*corev1.Secret, error) {
		if s, ok := secrets[name]; ok {
			return s, nil
		}
		s, err := r.k.cs.CoreV1().Secrets(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		secrets[name] = s
		return s, nil
	}
	getConfigMap := func(name string) (*corev1.ConfigMap, error) {
		if m, ok := configMaps[name]; ok {
			return m, nil
		}
		m, err := r.k.cs.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		configMaps[name] = m
		return m, nil
	}
	for _, from := range c.EnvFrom {
		switch {
		case from.SecretRef != nil:
			s, err := getSecret(from.SecretRef.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && from.SecretRef.Optional != nil && *from.SecretRef.Optional {
					continue
				}
				return nil, lookupError(err, "secret", from.SecretRef.Name)
			}
			for k, v := range s.Data {
				l.set(from.Prefix+k, string(v))
			}
		case from.ConfigMapRef != nil:
			m, err := getConfigMap(from.ConfigMapRef.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional {
					continue
				}
				return nil, lookupError(err, "configmap", from.ConfigMapRef.Name)
			}
			for k, v := range m.Data {
				l.set(from.Prefix+k, v)
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			l.set(e.Name, expand(e.Value, l.value))
			continue
		}
		switch from := e.ValueFrom; {
		case from.SecretKeyRef != nil:
			ref := from.SecretKeyRef
			optional := ref.Optional != nil && *ref.Optional
			s, err := getSecret(ref.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && optional {
					continue
				}
				return nil, lookupError(err, "secret", ref.Name)
			}
			v, ok := s.Data[ref.Key]
			if !ok {
				if optional {
					continue
				}
				return nil, configErrorf("couldn't find key %s in Secret %s/%s", ref.Key, pod.Namespace, ref.Name)
			}
			l.set(e.Name, string(v))
		case from.ConfigMapKeyRef != nil:
			ref := from.ConfigMapKeyRef
			optional := ref.Optional != nil && *ref.Optional
			m, err := getConfigMap(ref.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && optional {
					continue
				}
				return nil, lookupError(err, "configmap", ref.Name)
			}
			v, ok := m.Data[ref.Key]
			if !ok {
				if optional {
					continue
				}
				return nil, configErrorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, pod.Namespace, ref.Name)
			}
			l.set(e.Name, v)
		case from.FieldRef != nil:
			v, err := fieldValue(pod, from.FieldRef.FieldPath)
			if err != nil {
				return nil, err
			}
			l.set(e.Name, v)
		default:
			return nil, configErrorf("kubelettest cannot resolve the value of %s (only secretKeyRef, configMapKeyRef and fieldRef)", e.Name)
		}
	}
	return l, nil
}

// lookupError is a failed Get of a Secret or ConfigMap as the kubelet
// words it; every such failure is retried.
func lookupError(err error, kind, name string) error {
	if apierrors.IsNotFound(err) {
		return configErrorf("%s %q not found", kind, name)
	}
	return configErrorf("get %s %q: %v", kind, name, err)
}

var fieldKey = regexp.MustCompile(`^metadata\.(labels|annotations)\['([^']*)'\]$`)

// fieldValue is a fieldRef's value.
func fieldValue(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.hostIP", "status.podIPs", "status.hostIPs":
		return podIP, nil
	}
	if m := fieldKey.FindStringSubmatch(path); m != nil {
		if m[1] == "labels" {
			return pod.Labels[m[2]], nil
		}
		return pod.Annotations[m[2]], nil
	}
	return "", configErrorf("kubelettest cannot resolve the field %q", path)
}

// expand replaces $(NAME) by NAME's value when it is defined and $$ by $,
// as Kubernetes expands env values, command and args.
func expand(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteByte(s[i])
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}
