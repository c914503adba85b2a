//! Templates rendered again while the task runs, and what their `change_mode` asks for.
//!
//! Without Consul, Vault or Nomad variables, what a template reads can change only through the
//! files it reads (`{{ file }}`, a `source` in the task directory), so the watcher renders every
//! template again each [`TEMPLATE_WATCH_PERIOD`] and writes those whose output changed, as
//! consul-template's file dependency polls. The changed templates' modes are then folded as
//! Nomad's template manager folds them: one `restart` wins over everything; otherwise each
//! distinct `change_signal` is sent once and every `change_script` runs; `noop` only writes the
//! file. Before acting it waits a random part of the longest `splay` among them.

use super::{rerender_templates, Rendered};
use crate::limits::TEMPLATE_WATCH_PERIOD;
use crate::rng::Rng;
use crate::taskenv::TaskEnv;
use drivers::TaskDir;
use model::task::ChangeScript;
use model::Task;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// What a re-render asks of the running task.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TemplateChange {
    /// A changed template has `change_mode = "restart"`.
    pub restart: bool,
    /// The distinct `change_signal`s of changed `signal` templates.
    pub signals: BTreeSet<String>,
    /// The `change_script`s of changed `script` templates, in template order.
    pub scripts: Vec<ChangeScript>,
    /// The variables of the `env = true` templates now (they take effect on the next start).
    pub vars: BTreeMap<String, String>,
}

impl TemplateChange {
    /// Whether the task has to hear of it (not only `noop` templates changed).
    pub fn acts(&self) -> bool {
        self.restart || !self.signals.is_empty() || !self.scripts.is_empty()
    }
}

/// The re-rendering of one task's templates.
pub(crate) struct TemplateWatch {
    task: Task,
    env: TaskEnv,
    dir: TaskDir,
    rendered: Rendered,
    rng: Rng,
    /// The servers' API through the task's identity, for `nomadService`/`nomadVar`.
    nomad: Option<std::sync::Arc<super::nomad_api::NomadApi>>,
    /// The last re-render error, so a template that stays broken is logged once.
    last_error: Option<String>,
}

impl TemplateWatch {
    /// A watch over `task`'s templates as first rendered with `env` into `dir`; `None` when it
    /// has none.
    pub fn new(
        task: Task,
        env: TaskEnv,
        dir: TaskDir,
        rendered: Rendered,
        rng: Rng,
        nomad: Option<std::sync::Arc<super::nomad_api::NomadApi>>,
    ) -> Option<Self> {
        (!task.templates.is_empty()).then_some(TemplateWatch {
            task,
            env,
            dir,
            rendered,
            rng,
            nomad,
            last_error: None,
        })
    }

    /// Waits until a re-render changes some template (its file is written by then) and, when
    /// the change calls for it, the splay has passed; returns what the task should do.
    pub async fn changed(&mut self) -> TemplateChange {
        loop {
            tokio::time::sleep(TEMPLATE_WATCH_PERIOD).await;
            let (task, env, dir) = (self.task.clone(), self.env.clone(), self.dir.clone());
            let mut rendered = self.rendered.clone();
            let nomad = self.nomad.clone();
            let pass = tokio::task::spawn_blocking(move || {
                rerender_templates(&task, &env, &dir, nomad.as_deref(), &mut rendered)
                    .map(|c| (c, rendered))
            })
            .await
            .unwrap_or_else(|e| Err(format!("the template worker failed: {e}")));
            let changed = match pass {
                Ok((changed, rendered)) => {
                    self.last_error = None;
                    self.rendered = rendered;
                    changed
                }
                Err(e) => {
                    if self.last_error.as_ref() != Some(&e) {
                        tracing::warn!(task = %self.task.name, error = %e, "re-rendering a template failed; the old file stays");
                        self.last_error = Some(e);
                    }
                    continue;
                }
            };
            if changed.is_empty() {
                continue;
            }
            tracing::info!(task = %self.task.name, ?changed, "templates re-rendered");
            let (change, splay) = fold(&self.task, &changed, self.rendered.vars.clone());
            if change.acts() && !splay.is_zero() {
                tokio::time::sleep(self.rng.below(splay)).await;
            }
            return change;
        }
    }
}

/// Waits on the watch's next change; never resolves without one.
pub(crate) async fn next_change(watch: &mut Option<TemplateWatch>) -> TemplateChange {
    match watch {
        Some(w) => w.changed().await,
        None => std::future::pending().await,
    }
}

/// Folds the changed templates' modes (Nomad's `handleTemplateRerenders`); also the longest
/// splay among those that act.
fn fold(
    task: &Task,
    changed: &[usize],
    vars: BTreeMap<String, String>,
) -> (TemplateChange, Duration) {
    let mut change = TemplateChange {
        vars,
        ..TemplateChange::default()
    };
    let mut splay = Duration::ZERO;
    for t in changed.iter().filter_map(|i| task.templates.get(*i)) {
        match t.change_mode.as_deref().unwrap_or("restart") {
            "noop" => continue,
            "signal" => {
                change.signals.insert(t.change_signal.clone());
            }
            "script" => change.scripts.extend(t.change_script.clone()),
            _ => change.restart = true,
        }
        let s = t.splay.map_or(0, |d| u64::try_from(d.0).unwrap_or(0));
        splay = splay.max(Duration::from_nanos(s));
    }
    (change, splay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::task::Template;

    fn template(mode: &str, signal: &str, splay_ms: i64) -> Template {
        Template {
            dest_path: "local/out".into(),
            embedded_tmpl: "x".into(),
            change_mode: Some(mode.into()),
            change_signal: signal.into(),
            change_script: (mode == "script").then(|| ChangeScript {
                command: "/bin/reload".into(),
                ..ChangeScript::default()
            }),
            splay: Some(model::Duration(splay_ms * 1_000_000)),
            ..Template::default()
        }
    }

    fn task(templates: Vec<Template>) -> Task {
        Task {
            name: "t".into(),
            templates,
            ..Task::default()
        }
    }

    #[test]
    fn modes_fold_as_nomads_template_manager() {
        let t = task(vec![
            template("signal", "SIGHUP", 100),
            template("signal", "SIGHUP", 0),
            template("signal", "SIGUSR1", 0),
            template("script", "", 300),
            template("noop", "", 9000),
            template("restart", "", 200),
        ]);
        let (c, splay) = fold(&t, &[0, 1, 2, 3, 4], BTreeMap::new());
        assert!(!c.restart);
        assert_eq!(
            c.signals.iter().map(String::as_str).collect::<Vec<_>>(),
            ["SIGHUP", "SIGUSR1"],
            "each signal once"
        );
        assert_eq!(c.scripts.len(), 1);
        assert_eq!(
            splay,
            Duration::from_millis(300),
            "noop's splay does not count"
        );

        let (c, splay) = fold(&t, &[0, 5], BTreeMap::new());
        assert!(c.restart && c.acts());
        assert_eq!(splay, Duration::from_millis(200));

        let (c, _) = fold(&t, &[4], BTreeMap::new());
        assert!(!c.acts(), "noop only writes the file");
    }

    #[test]
    fn only_changed_outputs_are_written_again() {
        let tmp = drivers::testing::TestDir::new("client-template-rerender");
        let root = tmp.path().join("task");
        std::fs::create_dir_all(root.join("local")).unwrap();
        let dir = TaskDir::under(root.clone());
        std::fs::write(root.join("local/input"), "one").unwrap();
        let mut reads = template("signal", "SIGHUP", 0);
        reads.embedded_tmpl = r#"value={{ file "local/input" }}"#.into();
        reads.dest_path = "local/reads".into();
        reads.envvars = true;
        let mut fixed = template("restart", "", 0);
        fixed.dest_path = "local/fixed".into();
        let t = task(vec![reads, fixed]);
        let env = TaskEnv::default();
        let mut rendered = super::super::render_templates(&t, &env, &dir, None).unwrap();
        assert_eq!(rendered.outputs, ["value=one", "x"]);
        assert_eq!(rendered.vars.get("value").map(String::as_str), Some("one"));

        assert!(rerender_templates(&t, &env, &dir, None, &mut rendered)
            .unwrap()
            .is_empty());
        std::fs::write(root.join("local/input"), "two").unwrap();
        std::fs::write(root.join("local/fixed"), "edited by the task").unwrap();
        assert_eq!(
            rerender_templates(&t, &env, &dir, None, &mut rendered).unwrap(),
            [0]
        );
        assert_eq!(
            std::fs::read_to_string(root.join("local/reads")).unwrap(),
            "value=two"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("local/fixed")).unwrap(),
            "edited by the task",
            "an unchanged output is not written again"
        );
        assert_eq!(rendered.vars.get("value").map(String::as_str), Some("two"));

        std::fs::remove_file(root.join("local/input")).unwrap();
        assert!(rerender_templates(&t, &env, &dir, None, &mut rendered).is_err());
        assert_eq!(
            std::fs::read_to_string(root.join("local/reads")).unwrap(),
            "value=two",
            "a failed render keeps the old file"
        );
    }

    /// The task swaps its rendered file for a symlink to a file outside the allocation (one
    /// standing for /etc/passwd), then the template's input changes: the watcher's re-render
    /// replaces the symlink and leaves the outside file alone. A symlinked `local/` (-> a dir
    /// outside) makes the re-render fail, writing nothing there.
    #[test]
    fn a_rerender_never_writes_through_a_planted_symlink() {
        let tmp = drivers::testing::TestDir::new("client-template-symlink");
        let root = tmp.path().join("alloc/task");
        for d in ["local", "secrets"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let passwd = tmp.path().join("passwd");
        std::fs::write(&passwd, "root:x:0:0:root:/root:/bin/sh\n").unwrap();
        let dir = TaskDir::under(root.clone());
        std::fs::write(root.join("secrets/input"), "one").unwrap();
        let mut t = template("noop", "", 0);
        t.embedded_tmpl = r#"value={{ file "secrets/input" }}"#.into();
        t.dest_path = "local/out.txt".into();
        let t = task(vec![t]);
        let env = TaskEnv::default();
        let mut rendered = super::super::render_templates(&t, &env, &dir, None).unwrap();

        // A temp name the client might use, planted as a symlink: not followed either.
        let planted = root.join("local/.out.txt.caravan-tmp");
        std::os::unix::fs::symlink(&passwd, &planted).unwrap();
        std::fs::write(root.join("secrets/input"), "one and a half").unwrap();
        assert_eq!(
            rerender_templates(&t, &env, &dir, None, &mut rendered).unwrap(),
            [0]
        );
        assert_eq!(
            std::fs::read_to_string(&passwd).unwrap(),
            "root:x:0:0:root:/root:/bin/sh\n"
        );
        std::fs::remove_file(&planted).unwrap();

        let out = root.join("local/out.txt");
        std::fs::remove_file(&out).unwrap();
        std::os::unix::fs::symlink(&passwd, &out).unwrap();
        std::fs::write(root.join("secrets/input"), "two").unwrap();
        assert_eq!(
            rerender_templates(&t, &env, &dir, None, &mut rendered).unwrap(),
            [0]
        );
        assert_eq!(
            std::fs::read_to_string(&passwd).unwrap(),
            "root:x:0:0:root:/root:/bin/sh\n",
            "the file outside the allocation is unchanged"
        );
        assert!(!std::fs::symlink_metadata(&out)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "value=two");

        let elsewhere = tmp.path().join("x");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::remove_dir_all(root.join("local")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, root.join("local")).unwrap();
        std::fs::write(root.join("secrets/input"), "three").unwrap();
        let err = rerender_templates(&t, &env, &dir, None, &mut rendered).unwrap_err();
        assert!(err.contains("local is a symlink"), "{err}");
        assert!(std::fs::read_dir(&elsewhere).unwrap().next().is_none());

        // Reading through a planted symlink is refused the same way (no secret leaks into
        // a rendered file).
        std::fs::remove_file(root.join("local")).unwrap();
        std::fs::create_dir_all(root.join("local")).unwrap();
        std::fs::remove_file(root.join("secrets/input")).unwrap();
        std::os::unix::fs::symlink(&passwd, root.join("secrets/input")).unwrap();
        let err = rerender_templates(&t, &env, &dir, None, &mut rendered).unwrap_err();
        assert!(err.contains("secrets/input is a symlink"), "{err}");
    }
}
