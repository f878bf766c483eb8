//go:build !windows

package kubelettest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// volume is a pod volume on the host.
type volume struct {
	path     string
	readOnly bool
}

// claimsReady waits for nothing: it reports the first of the pod's
// PersistentVolumeClaims that does not exist yet or is being deleted (a
// scheduler leaves such a pod unscheduled), and marks the others Bound
// (envtest runs no volume controller).
func (r *podRun) claimsReady(ctx context.Context, pod *corev1.Pod) error {
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		name := v.PersistentVolumeClaim.ClaimName
		pvc, err := r.k.cs.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return configErrorf("persistentvolumeclaim %q not found", name)
		}
		if err != nil {
			return configErrorf("get persistentvolumeclaim %q: %v", name, err)
		}
		if pvc.DeletionTimestamp != nil {
			return configErrorf("persistentvolumeclaim %q is being deleted", name)
		}
		if pvc.Status.Phase != corev1.ClaimBound {
			pvc.Status.Phase = corev1.ClaimBound
			pvc.Status.AccessModes = pvc.Spec.AccessModes
			if size, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
				pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: size}
			}
			if _, err := r.k.cs.CoreV1().PersistentVolumeClaims(pod.Namespace).UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
				r.log.Debug("mark a claim bound", "claim", name, "err", err)
			}
		}
	}
	return nil
}

// volumes makes the pod's volumes on the host: emptyDir a directory of
// the pod's, persistentVolumeClaim the claim's directory (ClaimDir),
// secret and configMap a directory of files written again at each start,
// hostPath the path itself.
func (r *podRun) volumes(ctx context.Context, pod *corev1.Pod) (map[string]volume, error) {
	out := map[string]volume{}
	for _, v := range pod.Spec.Volumes {
		own := filepath.Join(r.dir, "volumes", v.Name)
		switch {
		case v.EmptyDir != nil:
			if err := os.MkdirAll(own, 0o777); err != nil {
				return nil, err
			}
			out[v.Name] = volume{path: own}
		case v.PersistentVolumeClaim != nil:
			name := v.PersistentVolumeClaim.ClaimName
			pvc, err := r.k.cs.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil, lookupError(err, "persistentvolumeclaim", name)
			}
			dir := r.k.ClaimDir(pod.Namespace, name, pvc.UID)
			if err := os.MkdirAll(dir, 0o777); err != nil {
				return nil, err
			}
			out[v.Name] = volume{path: dir, readOnly: v.PersistentVolumeClaim.ReadOnly}
		case v.Secret != nil:
			s, err := r.k.cs.CoreV1().Secrets(pod.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				if apierrors.IsNotFound(err) && v.Secret.Optional != nil && *v.Secret.Optional {
					s = &corev1.Secret{}
				} else {
					return nil, lookupError(err, "secret", v.Secret.SecretName)
				}
			}
			if err := writeFiles(own, s.Data, v.Secret.Items); err != nil {
				return nil, err
			}
			out[v.Name] = volume{path: own, readOnly: true}
		case v.ConfigMap != nil:
			m, err := r.k.cs.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				if apierrors.IsNotFound(err) && v.ConfigMap.Optional != nil && *v.ConfigMap.Optional {
					m = &corev1.ConfigMap{}
				} else {
					return nil, lookupError(err, "configmap", v.ConfigMap.Name)
				}
			}
			data := map[string][]byte{}
			for k, s := range m.Data {
				data[k] = []byte(s)
			}
			if err := writeFiles(own, data, v.ConfigMap.Items); err != nil {
				return nil, err
			}
			out[v.Name] = volume{path: own, readOnly: true}
		case v.HostPath != nil:
			out[v.Name] = volume{path: v.HostPath.Path}
		default:
			return nil, configErrorf("kubelettest cannot make volume %q (emptyDir, persistentVolumeClaim, secret, configMap and hostPath only)", v.Name)
		}
	}
	return out, nil
}

// writeFiles writes data into dir afresh, each key as a file (or as
// items map them).
func writeFiles(dir string, data map[string][]byte, items []corev1.KeyToPath) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	paths := map[string]string{}
	if len(items) == 0 {
		for k := range data {
			paths[k] = k
		}
	}
	for _, it := range items {
		paths[it.Key] = it.Path
	}
	for k, p := range paths {
		v, ok := data[k]
		if !ok {
			continue
		}
		f := filepath.Join(dir, filepath.Clean("/"+p))
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(f, v, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// mounts are a container's binds, parents before children, and makes
// each mount point and the working dir where they must exist: inside an
// earlier mount, in its host directory; under a top-level directory the
// host lacks, bwrap makes it in its own root. A path under a host
// directory that does not exist there is refused rather than made on the
// host.
func mounts(c *corev1.Container, vols map[string]volume, workDir string) ([]mount, error) {
	var out []mount
	for _, vm := range c.VolumeMounts {
		v, ok := vols[vm.Name]
		if !ok {
			return nil, configErrorf("volume %q of container %q is not a volume of the pod", vm.Name, c.Name)
		}
		src := v.path
		if vm.SubPath != "" {
			src = filepath.Join(src, filepath.Clean("/"+vm.SubPath))
			if err := os.MkdirAll(src, 0o777); err != nil {
				return nil, err
			}
		}
		out = append(out, mount{src: src, dest: filepath.Clean(vm.MountPath), readOnly: vm.ReadOnly || v.readOnly})
	}
	sort.SliceStable(out, func(i, j int) bool {
		return strings.Count(out[i].dest, "/") < strings.Count(out[j].dest, "/")
	})
	for i, m := range out {
		if err := makePoint(m.dest, out[:i], c.Name); err != nil {
			return nil, err
		}
	}
	if err := makePoint(workDir, out, c.Name); err != nil {
		return nil, err
	}
	return out, nil
}

// makePoint makes path exist in the sandbox that has binds.
func makePoint(path string, binds []mount, container string) error {
	for i := len(binds) - 1; i >= 0; i-- {
		b := binds[i]
		if path == b.dest {
			return nil
		}
		if strings.HasPrefix(path, b.dest+"/") {
			return os.MkdirAll(filepath.Join(b.src, strings.TrimPrefix(path, b.dest)), 0o777)
		}
	}
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	top := "/" + strings.SplitN(strings.TrimPrefix(path, "/"), "/", 2)[0]
	if _, err := os.Lstat(top); err != nil {
		return nil // made by bwrap in its tmpfs root
	}
	return fmt.Errorf("kubelettest: %s of container %q lies under the host's %s, where it does not exist (kubelettest does not make it on the host)", path, container, top)
}
