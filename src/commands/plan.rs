//! `steptrace plan`: checkpoint and swap decisions under a memory budget, written and printed.

use std::io::Write;

use crate::cli;
use crate::console::terminal_safe;
use crate::process::limit_threads;

pub(crate) fn run(args: cli::PlanArgs) -> anyhow::Result<u8> {
    use steptrace::plan::{Budget, Options, Policy};
    if let Some(n) = args.input.threads {
        limit_threads(n)?;
    }
    let props = args.input.props(None, 10)?;
    let budget = match &args.budget {
        Some(b) => Some(b.parse::<Budget>().map_err(steptrace::Error::Plan)?),
        None => None,
    };
    let opts = Options {
        budget,
        policy: match args.policy {
            cli::PolicyArg::Recompute => Policy::Recompute,
            cli::PolicyArg::Swap => Policy::Swap,
            cli::PolicyArg::Both => Policy::Both,
        },
        bandwidth_gbps: args.bandwidth.or(args.input.swap_bw),
        modules: (!args.modules.is_empty()).then(|| args.modules.clone()),
    };
    let (p, _analysis) = steptrace::plan_run(&props, &opts)?;
    let out = args.out.clone().unwrap_or_else(|| {
        let d = steptrace::default_out_dir(&props.input);
        d.with_extension("plan")
    });
    steptrace::report::plan::write(&out, &p, !args.no_plots).map_err(steptrace::Error::Output)?;
    if args.print_policy {
        let mut o = std::io::stdout().lock();
        o.write_all(terminal_safe(&steptrace::report::plan::policy_code(&p)).as_bytes())?;
    } else if !args.quiet {
        let mut o = std::io::stdout().lock();
        o.write_all(terminal_safe(&steptrace::report::plan::table(&p)).as_bytes())?;
        writeln!(o, "wrote {}", terminal_safe(&out.display().to_string()))?;
    }
    Ok(0)
}
