//! Scaling an int-or-percent against a total (spec index §1.1).
//!
//! Two helpers exist upstream and the fields pick different ones: the k8s
//! helper takes whole percentages only, Kruise's partition helper accepts
//! fractional ones (`"12.5%"`).

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// A string value that is not `"<number>%"`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid value for IntOrString: {0:?} is not a percentage")]
pub struct NotAPercent(pub String);

/// k8s `GetValueFromIntOrPercent`: an int as-is, `"N%"` of `total` rounded
/// up or down. Integer arithmetic, so no float rounding surprises.
pub fn value_from_int_or_percent(
    value: &IntOrString,
    total: i32,
    round_up: bool,
) -> Result<i32, NotAPercent> {
    match value {
        IntOrString::Int(int) => Ok(*int),
        IntOrString::String(text) => {
            let percent: i64 = text
                .strip_suffix('%')
                .and_then(|digits| digits.parse().ok())
                .ok_or_else(|| NotAPercent(text.clone()))?;
            let scaled = percent.saturating_mul(i64::from(total));
            let result = if round_up {
                -(scaled.saturating_neg().div_euclid(100))
            } else {
                scaled.div_euclid(100)
            };
            Ok(saturate(result))
        }
    }
}

/// Kruise `GetScaledValueFromIntOrPercent`: like the k8s helper, but the
/// percentage may be fractional.
pub fn scaled_value_from_int_or_percent(
    value: &IntOrString,
    total: i32,
    round_up: bool,
) -> Result<i32, NotAPercent> {
    match value {
        IntOrString::Int(int) => Ok(*int),
        IntOrString::String(text) => {
            let percent: f64 = text
                .strip_suffix('%')
                .and_then(crate::decimal::parse_f64)
                .filter(|p| p.is_finite())
                .ok_or_else(|| NotAPercent(text.clone()))?;
            let scaled = percent * f64::from(total) / 100.0;
            let rounded = if round_up {
                scaled.ceil()
            } else {
                scaled.floor()
            };
            #[allow(clippy::cast_possible_truncation)]
            let result = rounded.clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32;
            Ok(result)
        }
    }
}

/// Kruise `CalculatePartitionReplicas`: pods kept on old revisions.
///
/// A percentage below 100% that rounds up to every replica is lowered by
/// one, so `99%` of 4 still updates one pod; the result stays in
/// `[0, replicas]`. A missing `replicas` counts as 1.
pub fn calculate_partition_replicas(
    partition: Option<&IntOrString>,
    replicas: Option<i32>,
) -> Result<i32, NotAPercent> {
    let Some(partition) = partition else {
        return Ok(0);
    };
    let replicas = replicas.unwrap_or(1);
    let mut value = scaled_value_from_int_or_percent(partition, replicas, true)?;
    let below_full_percent = matches!(partition, IntOrString::String(text) if text != "100%");
    if replicas > 1 && value == replicas && below_full_percent {
        value = replicas - 1;
    }
    Ok(value.clamp(0, replicas.max(0)))
}

fn saturate(value: i64) -> i32 {
    i32::try_from(value).unwrap_or(if value < 0 { i32::MIN } else { i32::MAX })
}
