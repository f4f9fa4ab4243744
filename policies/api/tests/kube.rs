//! kube-rs takes our kinds as they are: its blanket `Resource` impl over
//! k8s-openapi's traits gives them URLs, so `kube::Api<CloneSet>` works
//! without kube-derive (and the wasm builds never compile kube).

use kruise_api::{
    CloneSet, ContainerRecreateRequest, ImagePullJob, NodeImage, ResourceDistribution, SidecarSet,
};
use kube_core::Resource;

fn url<K: Resource<DynamicType = ()>>(namespace: Option<&str>) -> String {
    K::url_path(&(), namespace)
}

#[test]
fn kube_rs_resolves_every_kind() {
    assert_eq!(
        url::<CloneSet>(Some("ns")),
        "/apis/apps.kruise.io/v1alpha1/namespaces/ns/clonesets"
    );
    assert_eq!(
        url::<ContainerRecreateRequest>(Some("ns")),
        "/apis/apps.kruise.io/v1alpha1/namespaces/ns/containerrecreaterequests"
    );
    assert_eq!(
        url::<ImagePullJob>(Some("ns")),
        "/apis/apps.kruise.io/v1alpha1/namespaces/ns/imagepulljobs"
    );
    assert_eq!(
        url::<SidecarSet>(None),
        "/apis/apps.kruise.io/v1alpha1/sidecarsets"
    );
    assert_eq!(
        url::<NodeImage>(None),
        "/apis/apps.kruise.io/v1alpha1/nodeimages"
    );
    assert_eq!(
        url::<ResourceDistribution>(None),
        "/apis/apps.kruise.io/v1alpha1/resourcedistributions"
    );
    assert_eq!(CloneSet::kind(&()), "CloneSet");
    assert_eq!(SidecarSet::api_version(&()), "apps.kruise.io/v1alpha1");
}

#[test]
fn object_meta_is_reachable_through_kube() {
    let cloneset = CloneSet::new("demo", kruise_api::cloneset::CloneSetSpec::default());
    assert_eq!(cloneset.meta().name.as_deref(), Some("demo"));
}
