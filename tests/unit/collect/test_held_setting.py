"""HeldSetting: the fix held while on, the script's wish given back while off."""

from __future__ import annotations

from perfdoctor.collect.appliers.held import HeldSetting


class Flag:
    def __init__(self, value: str) -> None:
        self.value = value

    def setting(self, fix: str) -> HeldSetting[str]:
        return HeldSetting(lambda: self.value, self.write, fix)

    def write(self, value: str) -> None:
        self.value = value


def test_hold_and_release_give_back_the_value_from_before():
    flag = Flag("script")
    setting = flag.setting("fix")
    setting.hold()
    assert flag.value == "fix"
    setting.release()
    assert flag.value == "script"
    setting.hold()
    assert flag.value == "fix"


def test_a_change_while_released_is_the_new_wish():
    flag = Flag("script")
    setting = flag.setting("fix")
    setting.hold()
    setting.release()
    flag.value = "later"  # the script, while off, through any path
    setting.hold()
    setting.release()
    assert flag.value == "later"


def test_a_change_past_the_interception_while_held_is_seen():
    flag = Flag("script")
    setting = flag.setting("fix")
    setting.hold()
    flag.value = "C-level"  # e.g. torch.backends.cudnn.flags()
    setting.hold()  # re-asserted, the script's value remembered
    assert flag.value == "fix"
    setting.release()
    assert flag.value == "C-level"


def test_an_intercepted_write_of_the_fixs_own_value_is_the_wish():
    flag = Flag("script")
    setting = flag.setting("fix")
    setting.hold()
    flag.value = "fix"  # the script asks for the fix's value itself
    setting.script_changed()
    setting.release()
    assert flag.value == "fix"
