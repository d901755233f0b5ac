package objectives

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API of InferenceObjective (GIE v1.5).
var GroupVersion = schema.GroupVersion{Group: "inference.networking.x-k8s.io", Version: "v1alpha2"}

// GroupVersionResource is what KubeSource reads, for RBAC.
var GroupVersionResource = GroupVersion.WithResource("inferenceobjectives")

// DefaultPoolGroup is spec.poolRef.group's default.
const DefaultPoolGroup = "inference.networking.k8s.io"

// InferenceObjective is the part of GIE's v1alpha2 InferenceObjective
// the EPP reads (its status, which GIE's controllers write, is left out).
type InferenceObjective struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              InferenceObjectiveSpec `json:"spec,omitempty"`
}

// InferenceObjectiveSpec is the objective's priority and pool.
type InferenceObjectiveSpec struct {
	// Priority: higher is served first; unset means 0.
	Priority *int `json:"priority,omitempty"`
	// PoolRef names the InferencePool in the objective's namespace.
	PoolRef PoolObjectReference `json:"poolRef"`
}

// PoolObjectReference names a pool.
type PoolObjectReference struct {
	Group string `json:"group,omitempty"`
	Kind  string `json:"kind,omitempty"`
	Name  string `json:"name"`
}

// InferenceObjectiveList is a list of objectives.
type InferenceObjectiveList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []InferenceObjective `json:"items"`
}

// DeepCopyInto copies o into out.
func (o *InferenceObjective) DeepCopyInto(out *InferenceObjective) {
	*out = *o
	out.TypeMeta = o.TypeMeta
	o.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if o.Spec.Priority != nil {
		p := *o.Spec.Priority
		out.Spec.Priority = &p
	}
}

// DeepCopy returns a copy of o.
func (o *InferenceObjective) DeepCopy() *InferenceObjective {
	if o == nil {
		return nil
	}
	out := new(InferenceObjective)
	o.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (o *InferenceObjective) DeepCopyObject() k8sruntime.Object {
	if c := o.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyObject implements runtime.Object.
func (l *InferenceObjectiveList) DeepCopyObject() k8sruntime.Object {
	if l == nil {
		return nil
	}
	out := &InferenceObjectiveList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]InferenceObjective, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

// AddToScheme registers InferenceObjective v1alpha2.
func AddToScheme(s *k8sruntime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &InferenceObjective{}, &InferenceObjectiveList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// Scheme knows InferenceObjective v1alpha2.
func Scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	if err := AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}
