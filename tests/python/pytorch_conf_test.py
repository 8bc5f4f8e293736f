"""PyTorch's allocator variables beside Tessera's own: which variable counts on each device, the keys honoured
with PyTorch's meaning and those ignored, Tessera's own configuration winning, and the notice given once.
Needs neither PyTorch nor libtessera_c.so.

    PYTHONPATH=python python3 tests/python/pytorch_conf_test.py
"""

import importlib.util
import os
import unittest
import warnings

from tessera import pytorch_conf


class MergeTest(unittest.TestCase):
    def test_no_pytorch_variable_changes_nothing(self):
        self.assertEqual(pytorch_conf.merge("cuda", None, {}), (None, None))
        self.assertEqual(pytorch_conf.merge("cuda", "reclaim:first", {"TESSERA_ALLOC_CONF": "x:1"}),
                         ("reclaim:first", None))

    def test_the_shared_keys_are_honoured_and_the_others_named_as_ignored(self):
        env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,garbage_collection_threshold:0.6,"
                                          "max_split_size_mb:128,roundup_power2_divisions:4,foo:1"}
        conf, notice = pytorch_conf.merge("cuda", None, env)
        self.assertEqual(conf, "garbage_collection_threshold:0.6,roundup_power2_divisions:4")
        self.assertIn("PYTORCH_CUDA_ALLOC_CONF is set", notice)
        self.assertIn("honoured with PyTorch's meaning: garbage_collection_threshold:0.6, roundup_power2_divisions:4",
                      notice)
        for ignored in ("expandable_segments (", "max_split_size_mb (", "foo (not a key of Tessera)"):
            self.assertIn(ignored, notice)
        self.assertNotIn("garbage_collection_threshold (", notice)

    def test_tesseras_own_configuration_wins(self):
        env = {"PYTORCH_ALLOC_CONF": "garbage_collection_threshold:0.6,roundup_power2_divisions:4",
               "TESSERA_ALLOC_CONF": "garbage_collection_threshold:0.8"}
        conf, notice = pytorch_conf.merge("cuda", None, env)
        self.assertEqual(conf, "garbage_collection_threshold:0.8,roundup_power2_divisions:4")
        self.assertIn("set by Tessera's own configuration instead: garbage_collection_threshold", notice)
        # enable's conf stands in for TESSERA_ALLOC_CONF.
        conf, _ = pytorch_conf.merge("cuda", "roundup_power2_divisions:2", env)
        self.assertEqual(conf, "roundup_power2_divisions:2,garbage_collection_threshold:0.6")

    def test_which_variable_counts_on_each_device(self):
        env = {"PYTORCH_ALLOC_CONF": "garbage_collection_threshold:0.5",
               "PYTORCH_CUDA_ALLOC_CONF": "garbage_collection_threshold:0.6",
               "PYTORCH_NPU_ALLOC_CONF": "garbage_collection_threshold:0.7"}
        self.assertEqual(pytorch_conf.merge("cuda", None, env)[0], "garbage_collection_threshold:0.5")
        self.assertEqual(pytorch_conf.merge("npu", None, env)[0], "garbage_collection_threshold:0.7")
        del env["PYTORCH_ALLOC_CONF"]
        self.assertEqual(pytorch_conf.merge("cuda", None, env)[0], "garbage_collection_threshold:0.6")
        del env["PYTORCH_NPU_ALLOC_CONF"]
        self.assertEqual(pytorch_conf.merge("npu", None, env), (None, None))  # torch_npu never reads the CUDA one
        self.assertEqual(pytorch_conf.merge("cpu", None, env), (None, None))

    def test_the_per_size_list_of_divisions_is_ignored_by_name(self):
        env = {"PYTORCH_CUDA_ALLOC_CONF": "roundup_power2_divisions:[256:1,512:2,>:8],max_split_size_mb:64"}
        conf, notice = pytorch_conf.merge("cuda", None, env)
        self.assertIsNone(conf)
        self.assertIn("roundup_power2_divisions (the per-size list", notice)
        self.assertIn("max_split_size_mb (", notice)

    def test_the_notice_is_given_once(self):
        told = []
        notice = "tessera: PYTORCH_CUDA_ALLOC_CONF is set; ignored: once_test (not a key of Tessera)"
        self.assertTrue(pytorch_conf.tell_once(notice, told.append))
        self.assertFalse(pytorch_conf.tell_once(notice, told.append))
        self.assertFalse(pytorch_conf.tell_once(None, told.append))
        self.assertEqual(told, [notice])


@unittest.skipUnless(importlib.util.find_spec("torch"), "needs PyTorch (python3-torch)")
class EnableTest(unittest.TestCase):
    def test_enable_warns_once_and_hands_the_honoured_keys_on(self):
        import tessera.torch  # PyTorch is imported here; the library is not loaded by this step
        saved = dict(os.environ)
        try:
            os.environ.pop("TESSERA_ALLOC_CONF", None)
            os.environ.pop("PYTORCH_ALLOC_CONF", None)
            os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True,garbage_collection_threshold:0.7"
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                first = tessera.torch._with_pytorch_conf("cuda", None)
                second = tessera.torch._with_pytorch_conf("cuda", None)
            self.assertEqual(first, "garbage_collection_threshold:0.7")
            self.assertEqual(second, first)
            messages = [str(w.message) for w in caught]
            self.assertEqual(len(messages), 1, messages)
            self.assertIn("ignored: expandable_segments", messages[0])
            self.assertIsNone(tessera.torch._with_pytorch_conf("cpu", None))
        finally:
            os.environ.clear()
            os.environ.update(saved)


if __name__ == "__main__":
    unittest.main()
