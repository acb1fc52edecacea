//! `shedlock check [NAME]`: every promise broken now, one line each, for a monitoring system
//! (exit 5 when any). The library's `Operator::check` finds them.

use serde_json::Value;
use shedlock::RunStore;

use crate::args::CheckArgs;
use crate::db::Steered;
use crate::failure::Failure;
use crate::jobs::desk;
use crate::output::{escape, pretty, print};

pub(crate) async fn check(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    args: &CheckArgs,
) -> Result<(), Failure> {
    let problems = desk(store, runs).check(args.name.as_deref()).await?;
    if args.json {
        let array: Vec<Value> = problems.iter().map(shedlock_web::json::problem).collect();
        print(&format!("{}\n", pretty(&Value::Array(array))));
    } else if problems.is_empty() {
        let what = args.name.as_deref().map_or_else(
            || "no promise broken".to_owned(),
            |n| format!("{n}: no promise broken"),
        );
        print(&format!("ok: {what}\n"));
    } else {
        let lines: String = problems
            .iter()
            .map(|p| format!("{}\n", escape(&p.to_string(), false)))
            .collect();
        print(&lines);
    }
    match problems.len() {
        0 => Ok(()),
        count => Err(Failure::Broken(count)),
    }
}
