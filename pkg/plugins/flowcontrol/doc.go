// Package flowcontrol groups the flow-control policy plugins, one folder
// each: ordering policies (fcfs, edf, slodeadline) order the requests of
// one flow, fairness policies (globalstrict, roundrobin) choose which flow
// of a priority band is served next, and usage-limit policies
// (staticusagelimit) set the saturation up to which a band may dispatch.
// The configuration loader resolves the flowControl section's
// orderingPolicyRef, fairnessPolicyRef and usageLimitPolicyPluginRef to
// these instances and hands them to pkg/flowcontrol.
package flowcontrol
