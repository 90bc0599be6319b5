"""tpcc's Python bridge against the stand-in torch and transformers of
shim/ (CI has neither): rendering real-shaped ParallelStyle objects,
reading diagnostics back to their plan keys, and --export round trips.
Run by ctest with TPCC (the built binary), TPCC_MODELS and PYTHONPATH
(python/ and python/tests/shim) set."""

import json
import os
import subprocess
import tempfile
import unittest

import tpcc
import torch.distributed.tensor.parallel as tp_api
import transformers
from torch.distributed.tensor import DeviceMesh, Partial, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, ParallelStyle,
                                               RowwiseParallel, SequenceParallel)

from plans import megatron_plan, sp_layer_plan, sp_root_plan

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
TPCC = os.environ["TPCC"]
SEQ = 16


def llama():
    return transformers.LlamaForCausalLM(transformers.LlamaConfig())


def tpcc_cli(*args, cwd=None):
    return subprocess.run([TPCC, "--color=never", *args], cwd=cwd, capture_output=True, text=True)


def read(path):
    with open(path) as f:
        return f.read()


def errors(diags):
    return [d for d in diags if d.level == "error"]


class Check(unittest.TestCase):
    def test_clean_megatron_plan(self):
        self.assertEqual(tpcc.check(llama(), megatron_plan(), tp=2, seq=SEQ), [])

    def test_clean_per_block_plan(self):
        plan = {"model.layers.*": sp_layer_plan(), "": sp_root_plan()}
        self.assertEqual(errors(tpcc.check(llama(), plan, tp=2, seq=SEQ)), [])
        tpcc.assert_clean(llama(), plan, tp=2, seq=SEQ)

    def test_sequence_sharded_embedding_needs_position_ids(self):
        # LlamaModel counts the positions from the embedding's output: a
        # sequence shard of it fails the forward unless the caller passes
        # position_ids
        plan = {"model.layers.*": sp_layer_plan(), "": sp_root_plan()}
        diags = tpcc.check(llama(), plan, tp=2, seq=SEQ)
        self.assertEqual([(d.check, d.level, d.path, d.key) for d in diags],
                         [("position-ids", "warning", "", "model.embed_tokens")])
        self.assertIn("position_ids=torch.arange(16)", diags[0].help[0])
        self.assertEqual(tpcc.check(llama(), plan, tp=2, seq=SEQ, position_ids=True), [])
        self.assertEqual(tpcc.check(llama(), megatron_plan(), tp=2, seq=SEQ), [])

    def test_rowwise_on_q_proj(self):
        plan = megatron_plan()
        plan["model.layers.*.self_attn.q_proj"] = RowwiseParallel()
        errs = errors(tpcc.check(llama(), plan, tp=2, seq=SEQ))
        self.assertTrue(errs)
        self.assertEqual({d.key for d in errs}, {"model.layers.*.self_attn.q_proj"})
        self.assertEqual({d.path for d in errs}, {""})
        self.assertEqual({d.check for d in errs}, {"relabel"}, [str(d) for d in errs])

    def test_sequence_parallel_without_prepare_module_input(self):
        # norms handing on plain sequence shards (as Hugging Face's
        # "sequence_parallel" does) need self_attn's PrepareModuleInput to
        # gather them; without it q, k and v label a shard Replicate()
        layer = sp_layer_plan()
        layer["input_layernorm"] = SequenceParallel(use_local_output=True)
        layer["post_attention_layernorm"] = SequenceParallel(use_local_output=True)
        plan = {"model.layers.*": dict(layer), "": sp_root_plan()}
        self.assertEqual(errors(tpcc.check(llama(), plan, tp=2, seq=SEQ)), [])
        del plan["model.layers.*"]["self_attn"]
        errs = errors(tpcc.check(llama(), plan, tp=2, seq=SEQ))
        self.assertEqual({(d.path, d.key, d.check) for d in errs},
                         {("model.layers.*", f"self_attn.{p}_proj", "relabel") for p in "qkv"})

    def test_prepare_module_input_by_position_where_called_by_keyword(self):
        layer = sp_layer_plan()
        layer["self_attn"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
        errs = errors(tpcc.check(llama(), {"model.layers.*": layer, "": sp_root_plan()}, tp=2, seq=SEQ))
        self.assertEqual({(d.key, d.check) for d in errs}, {("self_attn", "arity")})

    def test_block_findings_name_the_path(self):
        plan = {"model.layers.*.self_attn.q_proj": ColwiseParallel()}
        d = next(d for d in tpcc.check(llama(), plan, tp=2, seq=SEQ) if d.check == "uncovered-parameter")
        self.assertEqual((d.level, d.path, d.key), ("warning", "", None))

    def test_diagnostic_fields(self):
        plan = megatron_plan()
        plan["model.embed_tokens"] = RowwiseParallel(output_layouts=Shard(1))
        d = next(d for d in tpcc.check(llama(), plan, tp=2, seq=SEQ) if d.check == "relabel")
        self.assertEqual((d.level, d.key, d.file), ("error", "model.embed_tokens", "plan.plan"))
        self.assertIn("Replicate()", d.fix)
        self.assertTrue(d.notes and all(n.message for n in d.notes))

    def test_assert_clean_raises_with_the_text_report(self):
        plan = megatron_plan()
        plan["model.layers.*.self_attn.q_proj"] = RowwiseParallel()
        with self.assertRaises(tpcc.PlanCheckFailed) as cm:
            tpcc.assert_clean(llama(), plan, tp=2, seq=SEQ)
        self.assertIn("error:", str(cm.exception))
        self.assertIn('"model.layers.*.self_attn.q_proj": RowwiseParallel(', str(cm.exception))

    def test_divisibility_at_tp4(self):
        # 2 kv heads do not split over 4 ranks
        errs = errors(tpcc.check(llama(), megatron_plan(), tp=4, seq=SEQ))
        self.assertIn("divisibility", {d.check for d in errs})

    def test_extra_defines_and_loss_parallel(self):
        plan = megatron_plan()
        plan["lm_head"] = ColwiseParallel(use_local_output=False)
        diags = tpcc.check(llama(), plan, tp=2, seq=SEQ, loss_parallel=True, extra_defines={"batch": 2})
        self.assertEqual(errors(diags), [])
        self.assertIn("loss_parallel()", tpcc.render_plan(llama(), plan, loss_parallel=True))


class Render(unittest.TestCase):
    def test_styles_with_every_argument(self):
        text = tpcc.render_plan(llama(), {
            "a": ColwiseParallel(input_layouts=Shard(1), use_local_output=False),
            "b": SequenceParallel(sequence_dim=0, use_local_output=True),
            "c": PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
            "d": RowwiseParallel(input_layouts=Partial()),
        })
        self.assertIn('"a": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), '
                      'use_local_output=False),', text)
        self.assertIn('"b": SequenceParallel(sequence_dim=0, use_local_output=True),', text)
        self.assertIn('"c": PrepareModuleInput(input_layouts=(Shard(1), None), '
                      'desired_input_layouts=(Replicate(), None), use_local_output=False),', text)
        self.assertIn('"d": RowwiseParallel(input_layouts=Partial(), output_layouts=Replicate(),', text)
        self.assertIn("mesh(tp = tp)", text)

    def test_styles_are_the_tables(self):
        """python/tpcc/styles.py reads the classes of compiler/plan/styles.def,
        in its order, and writes only the keywords each constructor takes."""
        import re
        from tpcc import styles
        table = re.findall(r'^STYLE\((\w+), (\w+),\s*KEYWORDS\(([^)]*)\)', read(
            os.path.join(ROOT, "compiler", "plan", "styles.def")), re.M)
        self.assertEqual([cls for _, cls, _ in table], list(styles._STYLES))
        api = {cls: getattr(tp_api, cls) for _, cls, _ in table}
        made = {"PrepareModuleOutput": dict(output_layouts=Shard(1), desired_output_layouts=Replicate()),
                "PrepareModuleInputOutput": dict(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
                                                 output_layouts=Shard(1), desired_output_layouts=Replicate()),
                "PrepareModuleInput": dict(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))}
        for _, cls, keywords in table:
            written = styles.style("k", api[cls](**made.get(cls, {})))
            took = set(re.findall(r'"([^"]+)"', keywords))
            for kw in re.findall(r'(\w+)=', written):
                self.assertIn(kw, took, f"{cls}: {written}")

    def test_two_dimensional_mesh(self):
        mesh = DeviceMesh("cpu", (1, 2), mesh_dim_names=("dp", "tp"))
        text = tpcc.render_plan(llama(), megatron_plan(), mesh=mesh)
        self.assertIn("mesh(dp = 1, tp = tp)", text)
        self.assertIn('parallelize "" on "tp" {', text)
        self.assertEqual(tpcc.check(llama(), megatron_plan(), mesh=mesh, seq=SEQ), [])

    def test_custom_style_names_its_key(self):
        class MyColwise(ColwiseParallel):
            pass

        plan = megatron_plan()
        plan["lm_head"] = MyColwise()
        with self.assertRaises(tpcc.UnsupportedStyleError) as cm:
            tpcc.check(llama(), plan, seq=SEQ)
        self.assertEqual(cm.exception.key, "lm_head")
        self.assertIn("'lm_head'", str(cm.exception))

        plan["lm_head"] = ParallelStyle()
        with self.assertRaises(tpcc.UnsupportedStyleError):
            tpcc.render_plan(llama(), plan)

    def test_partial_other_than_sum(self):
        with self.assertRaises(tpcc.UnsupportedStyleError) as cm:
            tpcc.render_plan(llama(), {"lm_head": ColwiseParallel(input_layouts=Partial("avg"))})
        self.assertIn("avg", str(cm.exception))

    def test_unknown_family(self):
        model = llama()
        model.config._diff = dict(model.config._diff, model_type="mixtral")
        with self.assertRaises(tpcc.TpccNotFound) as cm:
            tpcc.check(model, megatron_plan())
        self.assertIn("mixtral", str(cm.exception))


class Export(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.config = os.path.join(self.dir.name, "config.json")
        with open(self.config, "w") as f:
            f.write(llama().config.to_json_string())

    def tearDown(self):
        self.dir.cleanup()

    def exported(self, plan_file):
        out = os.path.join(self.dir.name, "exported.py")
        p = tpcc_cli("--export=pytorch", plan_file, "-o", out, cwd=ROOT)
        self.assertEqual(p.returncode, 0, p.stderr)
        scope = {}
        with open(out) as f:
            exec(compile(f.read(), out, "exec"), scope)
        return scope

    def dump(self, plan_file, cwd):
        sched = os.path.join(self.dir.name, "out.sched")
        p = tpcc_cli("--hf-config", self.config, "-D", f"seq={SEQ}", plan_file, "-o", sched, cwd=cwd)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = tpcc_cli("--dump", sched)
        self.assertEqual(p.returncode, 0, p.stderr)
        # the plan's path and the inputs' hash differ; the program must not
        return [line for line in p.stdout.splitlines() if "plan" not in line and "hash" not in line]

    def test_pytorch_round_trip(self):
        scope = self.exported("plans/llama-sp.plan")
        self.assertFalse(scope["LOSS_PARALLEL"])
        self.assertEqual([path for path, _ in scope["PLAN"]], ["model.layers.*", ""])
        self.assertEqual(tpcc.check(llama(), scope["PLAN"], tp=2, seq=SEQ, position_ids=True), [])

        text = tpcc.render_plan(llama(), scope["PLAN"], tp=2)
        rendered = os.path.join(self.dir.name, "rendered.plan")
        with open(rendered, "w") as f:
            f.write(text)
        self.assertEqual(self.dump(rendered, self.dir.name), self.dump("plans/llama-sp.plan", ROOT))

    def test_parallelize_calls_parallelize_module_per_block(self):
        scope = self.exported("plans/llama-sp.plan")
        model = llama()
        tp_api.calls.clear()
        mesh = DeviceMesh("cpu", (2,))
        self.assertIs(scope["parallelize"](model, mesh), model)
        layers = list(model.model.layers)
        self.assertEqual([c[0] for c in tp_api.calls], layers + [model])
        self.assertTrue(all(c[1] is mesh for c in tp_api.calls))
        root = tp_api.calls[-1][2]
        self.assertEqual(root["lm_head"].input_layouts, (Shard(1),))
        self.assertEqual(root["lm_head"].output_layouts, (Replicate(),))
        attn = tp_api.calls[0][2]["self_attn"]
        self.assertEqual(attn.input_kwarg_layouts, {"hidden_states": Shard(1)})

    def test_loss_parallel_is_noted(self):
        scope = self.exported("plans/llama-tiny.plan")
        self.assertTrue(scope["LOSS_PARALLEL"])

    def test_hf_tp_plan(self):
        p = tpcc_cli("--export=hf", "plans/llama-megatron.plan", cwd=ROOT)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout), {
            "model.layers.*.self_attn.q_proj": "colwise",
            "model.layers.*.self_attn.k_proj": "colwise",
            "model.layers.*.self_attn.v_proj": "colwise",
            "model.layers.*.self_attn.o_proj": "rowwise",
            "model.layers.*.mlp.gate_proj": "colwise",
            "model.layers.*.mlp.up_proj": "colwise",
            "model.layers.*.mlp.down_proj": "rowwise",
            "model.embed_tokens": "embedding_rowwise",
            "lm_head": "colwise_gather_output",
        })

    def test_hf_refuses_what_it_cannot_say(self):
        p = tpcc_cli("--export=hf", "--diagnostics-format=json", "plans/llama-sp.plan", cwd=ROOT)
        self.assertEqual(p.returncode, 1)
        self.assertEqual(p.stdout, "")
        doc = json.loads(p.stderr)
        entries = {(d["line"], d["check"]) for d in doc["diagnostics"]}
        self.assertIn((15, "export"), entries)      # "self_attn": PrepareModuleInput(...)
        self.assertIn((13, "export"), entries)      # SequenceParallel(): use_local_output=False

    def test_plans_with_errors_are_not_exported(self):
        p = tpcc_cli("--export=pytorch", "tests/bad/relabel-rowwise-embedding.plan", cwd=ROOT)
        self.assertEqual((p.returncode, p.stdout), (1, ""))

    def test_output_never_replaces_an_input(self):
        for victim in ("plans/llama-sp.plan", "models/llama.model"):
            before = read(os.path.join(ROOT, victim))
            p = tpcc_cli("--export=pytorch", "plans/llama-sp.plan", "-o", victim, cwd=ROOT)
            self.assertEqual(p.returncode, 2)
            self.assertIn("an input: nothing was written", p.stderr)
            self.assertEqual(read(os.path.join(ROOT, victim)), before)


if __name__ == "__main__":
    unittest.main()
